"""compare_packing's sentence names what dynamic CP's runtime groups and the data loader decide: groups inside a node
against the largest across nodes, and a loader that cannot keep up with samples tokenized on the fly."""

from __future__ import annotations

from advisor.advice.compare import compare_packing
from tests.unit.advice.test_compare_modes import WAYS, assert_the_choice_follows_the_rule, plan


def test_the_sentence_says_the_short_sequences_groups_stay_inside_a_node(long_context):
    # 64 H100s, CP 16 (DP 4): the ranks' micro batches balance better on groups of their own size
    c = compare_packing(plan(64, 16), long_context, megatron_lm=None)
    assert_the_choice_follows_the_rule(c, long_context.total_tokens)
    assert c.recommended == WAYS[3]
    assert "inside one node, the largest groups (64 ranks) across nodes" in c.why


def test_a_loader_that_cannot_keep_up_decides_for_offline_packing(long_context):
    training = {"seq_length": 131072, "global_batch_samples": 64, "recompute": "full"}
    c = compare_packing(
        plan(16, 8, training={**training, "dataloader_seconds_per_sample": 8.0}), long_context, megatron_lm=None
    )
    assert_the_choice_follows_the_rule(c, long_context.total_tokens)
    offline = c.run(WAYS[0]).estimate
    assert "dataloader" not in offline.time.breakdown  # tokenized when it was packed
    assert all(c.run(w).estimate.time.breakdown["dataloader"] > 0 for w in WAYS[1:])
    assert c.recommended == WAYS[0]
    assert c.why.startswith("the data loader cannot keep up under") and "tokenized once, when it is packed" in c.why
