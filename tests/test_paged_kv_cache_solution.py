# ~/~ begin <<docs/lab/03-paged-attn-reading.md#tests/test_paged_kv_cache_solution.py>>[init]
"""The paged cache with the solution's copy-on-write switched off (tangled from
docs/lab/03-paged-attn-reading.md; not run by `make check-mine`)."""

import test_paged_kv_cache as lab  # the lab's server (a module: its tests are not re-collected)

from minimodel.block_manager import BlockManager


# ~/~ begin <<docs/lab/03-paged-attn-reading.md#paged-kv-check-cow-off>>[init]
def test_without_copy_on_write_the_forked_parent_goes_wrong(monkeypatch):
    monkeypatch.setattr(BlockManager, "_copy_on_write", lambda self, seq: None)
    model = lab.make_model(lab.CONFIG)
    server, _, _ = lab.serve_verbs(model)
    bad = lab.mismatches(model, server.done)
    assert lab.A in bad  # the parent read the key its child wrote into their shared block
    assert set(bad) <= {lab.A, lab.A2}  # nothing else shared a written block
# ~/~ end
# ~/~ end
