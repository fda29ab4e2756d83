"""The kubelet's half of dra-driver (R-DRA, docs/dra.md): the claims it prepared, their CDI specs and the checkpoint.

Why apart from the loop: the loop (`services.dra_driver.agent`) publishes; this answers the kubelet's gRPC
threads. `prepare` reads each claim, writes its CDI spec (durably) and then the checkpoint, in that order, so
a prepared claim always has its spec; a claim already in the checkpoint is answered from it (the kubelet
retries, and a restarted driver must answer the same). `unprepare` removes the spec, then the checkpoint
entry; a claim it does not know is already undone. One lock serialises the two (and guards what the loop
last published), so concurrent calls never interleave their checkpoint writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from metax_core.dra import model, slices
from metax_core.dra import prepare as preparing
from metax_core.errors import HardwareError, InvalidSpec, MetaxError
from metax_core.inventory import PciAddress
from metax_core.ports import node as node_ports
from metax_core.ports.cluster import Objects
from services._agent import loop
from services.dra_driver.config import Settings

log = logging.getLogger(__name__)


class PreparedClaims:
    """The `ClaimPreparer` the kubelet server asks, on the devices the loop last published."""

    def __init__(self, settings: Settings, *, files: node_ports.ClaimStore, objects: Objects) -> None:
        self.settings = settings
        self.files = files
        self.objects = objects
        self.lock = threading.Lock()
        self._checkpoint = preparing.Checkpoint()
        self.published: dict[str, slices.PublishedDevice] = {}
        """What the ResourceSlices offer by device name (written by the loop under `lock`)."""
        self.device_nodes: dict[PciAddress, tuple[str, ...]] = {}
        """Each function's device nodes, as the loop last read them."""

    def load(self, say: loop.Say) -> None:
        """Read the checkpoint the last run left (the claims it prepared); HardwareError when unreadable."""
        try:
            loaded = self.files.load_checkpoint()
        except (HardwareError, InvalidSpec) as exc:
            # Refuse to serve rather than forget prepared claims: the kubelet keeps retrying, an admin can act.
            say("checkpoint", f"cannot read the checkpoint, not serving the kubelet: {exc}", logging.ERROR)
            raise HardwareError("read the checkpoint", str(self.settings.checkpoint), str(exc)) from exc
        with self.lock:
            self._checkpoint = loaded
        say("checkpoint", f"{len(loaded.claims)} prepared claim(s) in the checkpoint")

    def prepare(self, claims: Sequence[model.ClaimRef]) -> Mapping[str, model.ClaimOutcome]:
        return {ref.uid: self._prepare_one(ref) for ref in claims}

    def _prepare_one(self, ref: model.ClaimRef) -> model.ClaimOutcome:
        where = f"ResourceClaim {ref.namespace}/{ref.name}"
        with self.lock:
            done = self._checkpoint.claims.get(ref.uid)
            if done is not None and self.files.has_spec(ref.uid):
                return model.ClaimOutcome(devices=done.devices)
            try:
                claim = self.objects.get("resource.k8s.io/v1", "ResourceClaim", ref.name, ref.namespace)
                if claim is None:
                    return model.ClaimOutcome.failed(f"{where} not found")
                inputs = preparing.Inputs(
                    dict(self.published),
                    dict(self.device_nodes),
                    installed_sdks=self.files.installed_sdks(),
                    sdk_host_dir=self.settings.sdk_mount_source,
                )
                prepared = preparing.prepare(ref, claim, self.settings.node_name, inputs)
                self.files.write_spec(ref.uid, prepared.spec)
                checkpoint = self._checkpoint.with_claim(preparing.PreparedClaim(ref, prepared.outcome.devices))
                self.files.save_checkpoint(checkpoint)
                self._checkpoint = checkpoint
            except preparing.PrepareRefused as exc:
                log.warning("%s not prepared: %s", where, exc)
                return model.ClaimOutcome.failed(f"{where}: {exc}")
            except MetaxError as exc:
                log.warning("%s not prepared: %s", where, exc)
                return model.ClaimOutcome.failed(f"{where}: {exc}")
        log.info("prepared %s: %s", where, ", ".join(d.device for d in prepared.outcome.devices))
        return prepared.outcome

    def unprepare(self, claims: Sequence[model.ClaimRef]) -> Mapping[str, str]:
        out = {}
        for ref in claims:
            with self.lock:
                try:
                    self.files.remove_spec(ref.uid)
                    if ref.uid in self._checkpoint.claims:
                        checkpoint = self._checkpoint.without(ref.uid)
                        self.files.save_checkpoint(checkpoint)
                        self._checkpoint = checkpoint
                        log.info("unprepared ResourceClaim %s/%s", ref.namespace, ref.name)
                    out[ref.uid] = ""
                except MetaxError as exc:
                    out[ref.uid] = f"ResourceClaim {ref.namespace}/{ref.name}: {exc}"
        return out

    def checkpoint(self) -> preparing.Checkpoint:
        """The prepared claims as of now."""
        with self.lock:
            return self._checkpoint
