"""What a waiting rollout step tells the administrator (R-ROLLOUT, issue 20 item 7, `metax_core.rollout.confirm`).

Aspects: the hint names the CLI line with the step number and the fully qualified ``kubectl annotate`` line
with the token, and says that ``pause: false`` (the seed's way) confirms nothing; the machine's own waiting
messages (a manual pause, the "pause" fallback) carry the hint for the step and token that wait, in the
Progressing condition and in ``message`` (the Event the operator emits); the kubectl line writes the same
annotation as the CLI's patch.
"""

from __future__ import annotations

import shlex

import attrs
from rollout_run import SEED, Run, condition, reason

from metax_core.rollout import confirm
from metax_core.rollout.status import ConditionType as CT
from metax_core.rollout.status import Reason
from metax_core.spec import model as spec


def test_the_hint_names_both_commands_and_what_does_not_work() -> None:
    assert confirm.hint(2, "abc-step2-1234") == (
        "to confirm step 2, run: metax-operator rollout confirm --step 2 (without the CLI: kubectl annotate "
        "clusteroperators.gpu.metax-tech.com cluster-operator metax-tech.com/rollout-confirm=abc-step2-1234 "
        "--overwrite); setting pause: false does not confirm a step"
    )


def test_the_kubectl_line_writes_what_the_cli_patch_writes() -> None:
    words = shlex.split(confirm.kubectl_command("tok-step1-00"))
    assert words[:4] == ["kubectl", "annotate", f"clusteroperators.{spec.API_GROUP}", spec.OBJECT_NAME]
    key, value = words[4].split("=", 1)
    assert confirm.annotation_patch("tok-step1-00") == {"metadata": {"annotations": {key: value}}}
    assert words[5:] == ["--overwrite"]


def test_a_manual_pause_says_how_to_confirm_that_step() -> None:
    run = Run(SEED)
    waiting = run.until(lambda d: reason(d) is Reason.WAITING_FOR_ADMIN, resume=False)
    st = waiting.status.status
    assert st.current_step_index == 0 and st.confirm_token
    hint = confirm.hint(1, st.confirm_token)
    assert condition(waiting, CT.PROGRESSING).message.endswith(hint)
    assert hint in waiting.status.message  # the DriverRollout<state> Event's message


def test_the_last_step_and_a_held_rollout_name_their_own_step() -> None:
    run = Run(SEED)
    run.until(lambda d: reason(d) is Reason.WAITING_FOR_ADMIN, resume=False)
    run.confirm()
    last = run.until(lambda d: reason(d) is Reason.WAITING_FOR_ADMIN and d.status.status.current_step_index == 3)
    assert confirm.hint(4, last.status.status.confirm_token) in condition(last, CT.PROGRESSING).message
    run.pause(True)
    held = run.decide()
    message = condition(held, CT.PROGRESSING).message
    assert confirm.hint(4, held.status.status.confirm_token) in message and "pause is true" in message


def test_the_pause_fallback_says_how_to_confirm_the_retry() -> None:
    run = Run(attrs.evolve(SEED, max_failure_threshold=0, fallback=spec.Fallback.PAUSE))
    paused = run.until(lambda d: reason(d) is Reason.FALLBACK_PAUSED, failing={"node-01", "node-02"}, resume=False)
    st = paused.status.status
    assert st.confirm_token and condition(paused, CT.FAILED).reason is Reason.STEP_FAILED
    assert confirm.hint(st.current_step_index + 1, st.confirm_token) in condition(paused, CT.PROGRESSING).message
    assert confirm.hint(st.current_step_index + 1, st.confirm_token) in paused.status.message
