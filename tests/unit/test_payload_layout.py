"""The payload layout and the vermagic choice (metax_core.node.payload_layout; issue 21 item 5, R-DRIVER).

Covers: vermagic parsing (Debian's trailing space, flags kept in order), the layout's paths and what a release
may be, the choice among several kernels (the running release wins, flags must match when known, a release
directory wins over the flat form, the directory name is not trusted), the refusal naming the running kernel
and every covered one, and with hypothesis: the choice is never a module built for another kernel, and a
refusal happens exactly when no module matches.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metax_core.node import payload_layout as pl

RUNNING = "6.1.0-57-amd64"
FLAGS = ("SMP", "preempt", "mod_unload", "modversions")


def magic(release: str, *flags: str) -> pl.Vermagic:
    return pl.Vermagic(release, flags or FLAGS)


def test_vermagic_parses_what_modinfo_prints() -> None:
    parsed = pl.Vermagic.parse("6.1.0-57-amd64 SMP preempt mod_unload modversions \n")
    assert parsed == magic(RUNNING) and str(parsed) == "6.1.0-57-amd64 SMP preempt mod_unload modversions"
    with pytest.raises(ValueError, match="empty vermagic"):
        pl.Vermagic.parse("  \n")


def test_layout_paths() -> None:
    assert pl.module_relpath(RUNNING) == "driver/6.1.0-57-amd64/metax.ko"
    assert pl.host_module_path("2.20.0", RUNNING) == "/var/lib/metax/drivers/2.20.0/6.1.0-57-amd64/metax.ko"
    assert pl.PayloadModule(pl.FLAT, None).relpath == "driver/metax.ko"
    for bad in ("", ".", "..", "a/b", "6.1 x"):
        with pytest.raises(ValueError, match="kernel release"):
            pl.module_relpath(bad)


def test_the_current_link_names_the_running_versions_user_space_only() -> None:
    """mx-smi and libmxsml come with their driver (no image carries them): the running version's, or none."""
    assert pl.host_version_dir("2.20.0") == "/var/lib/metax/drivers/2.20.0"
    assert pl.HOST_TOOLS_DIR == "/var/lib/metax/drivers/current/bin"
    assert pl.HOST_LIBRARY == "/var/lib/metax/drivers/current/lib/libmxsml.so"
    assert pl.current_link("2.20.0", ["2.18.0", "2.20.0"]) == "2.20.0"
    assert pl.current_link("2.18.0", ["2.20.0"]) is None  # a tool of another version may not speak to this driver
    assert pl.current_link(None, ["2.20.0"]) is None  # no driver runs
    for bad in ("", "..", "a/b", "current", "2 0"):
        with pytest.raises(ValueError, match="driver version"):
            pl.host_version_dir(bad)


def test_the_running_kernels_module_is_chosen_among_several() -> None:
    modules = [
        pl.PayloadModule("6.1.0-56-amd64", magic("6.1.0-56-amd64")),
        pl.PayloadModule(RUNNING, magic(RUNNING)),
        pl.PayloadModule("6.12.117+deb12-amd64", magic("6.12.117+deb12-amd64")),
    ]
    chosen = pl.choose_module(modules, pl.RunningKernel(RUNNING, magic(RUNNING)))
    assert isinstance(chosen, pl.ModuleChoice) and chosen.module.location == RUNNING and chosen.release == RUNNING


def test_a_release_directory_wins_over_the_flat_module_and_the_flat_one_still_works() -> None:
    both = [pl.PayloadModule(pl.FLAT, magic(RUNNING)), pl.PayloadModule(RUNNING, magic(RUNNING))]
    chosen = pl.choose_module(both, pl.RunningKernel(RUNNING))
    assert isinstance(chosen, pl.ModuleChoice) and chosen.module.location == RUNNING
    flat = pl.choose_module(both[:1], pl.RunningKernel(RUNNING))
    assert isinstance(flat, pl.ModuleChoice) and flat.module.relpath == "driver/metax.ko"


def test_an_uncovered_kernel_is_refused_naming_running_and_covered_kernels() -> None:
    modules = [
        pl.PayloadModule("6.1.0-56-amd64", magic("6.1.0-56-amd64")),
        pl.PayloadModule("broken", None, "modinfo exited with 1: not a module"),
    ]
    refused = pl.choose_module(modules, pl.RunningKernel(RUNNING, magic(RUNNING)))
    assert isinstance(refused, pl.KernelNotCovered)
    assert refused.running == RUNNING and refused.covered == ("6.1.0-56-amd64 SMP preempt mod_unload modversions",)
    assert "running kernel 6.1.0-57-amd64; it covers 6.1.0-56-amd64 SMP" in refused.message
    assert "driver/broken/metax.ko: modinfo exited with 1" in refused.message


def test_the_directory_name_is_not_trusted_only_the_vermagic() -> None:
    misfiled = [pl.PayloadModule(RUNNING, magic("6.1.0-56-amd64"))]
    assert isinstance(pl.choose_module(misfiled, pl.RunningKernel(RUNNING)), pl.KernelNotCovered)


def test_same_release_other_flags_is_refused_and_says_so() -> None:
    rt = [pl.PayloadModule(RUNNING, magic(RUNNING, "SMP", "preempt_rt", "mod_unload", "modversions"))]
    refused = pl.choose_module(rt, pl.RunningKernel(RUNNING, magic(RUNNING)))
    assert isinstance(refused, pl.KernelNotCovered) and "preempt_rt" in refused.message
    assert isinstance(pl.choose_module(rt, pl.RunningKernel(RUNNING)), pl.ModuleChoice)  # flags unknown: release


releases = st.sampled_from([RUNNING, "6.1.0-56-amd64", "6.12.117+deb12-amd64", "5.15.0-91-generic"])
flag_sets = st.sampled_from([FLAGS, ("SMP", "preempt_rt", "mod_unload", "modversions"), ("SMP", "mod_unload")])
module_st = st.builds(
    pl.PayloadModule,
    location=st.one_of(st.just(pl.FLAT), releases),
    vermagic=st.one_of(st.none(), st.builds(pl.Vermagic, releases, flag_sets)),
)


@given(st.lists(module_st, max_size=6), releases, st.one_of(st.none(), flag_sets))
def test_never_a_module_for_another_kernel(modules: list[pl.PayloadModule], release: str, flags: object) -> None:
    running = pl.RunningKernel(release, None if flags is None else pl.Vermagic(release, flags))  # type: ignore[arg-type]
    result = pl.choose_module(modules, running)
    fits = [
        m
        for m in modules
        if m.vermagic is not None
        and m.vermagic.release == release
        and (running.vermagic is None or m.vermagic.flags == running.vermagic.flags)
    ]
    if fits:
        assert isinstance(result, pl.ModuleChoice) and result.module in fits
    else:
        assert isinstance(result, pl.KernelNotCovered) and release in result.message
        assert all(str(m.vermagic) in result.covered for m in modules if m.vermagic is not None)
