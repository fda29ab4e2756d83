"""The batched canary driver upgrade (R-ROLLOUT): a pure state machine and what surrounds it.

`machine.decide` is the entry point; `model` its inputs and outputs, `fleet` the snapshot of the driver pods
(revisions and the failure rule), `status` the stored status document
(Table 3.16), `plan` the policy arithmetic, `steps` and `draft` the rules per situation, `rules` what the
webhook refuses mid-rollout, `sim` a whole rollout on a simulated fleet.
"""
