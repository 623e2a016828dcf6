"""Scratch: bisect the lost ERR_BAD_ENTRY of test_gpu_bad_entries_and_lengths_leave_the_context_usable
on the GPU in one run. The test's two decode calls (normal lengths [3000, 5000] and over-long
[3000, 9000], table[1, 100] = -1, max_context_len=5000) through variant modules of
src/minimodel/paged_attention.py (text edits, as scratch/variants.py makes them):
  table: "blocks" (this branch: one entry per block) or "perkey" (main: one masked load per key)
  flag:  "one" (code = BAD_ENTRY | BAD_LENGTH, one atomic_or), "split" (one atomic_or per bit),
         "debug" (one atomic_or, and each program also stores max(bad_keys) and its code)
  fold True/False, num_stages 3 (the GPU default) or 1 (no software pipelining), and the default
  split (19 on an H200) or num_splits=1.
Run on the device from the repository root:
  PYTHONPATH=src:. python3 scratch/flagbug_gpu.py $OUT/flagbug-h200.json
Under TRITON_INTERPRET=1 (CPU) it runs a small part of the matrix, to check the script."""
import importlib.util, itertools, json, pathlib, sys
import torch
sys.path.insert(0, "tests")
from test_paged_attention import make_cache, make_q, spare_block, fenced

SRC = pathlib.Path("src/minimodel/paged_attention.py").read_text()
BLOCKS = """                blk = start_n // BLOCK_SIZE + tl.arange(0, BLOCK_N // BLOCK_SIZE)
                entry = tl.load(table + blk * stride_tc, mask=blk * BLOCK_SIZE < end, other=0)
                per_key = tl.broadcast_to(entry[:, None], [BLOCK_N // BLOCK_SIZE, BLOCK_SIZE])
                phys = tl.reshape(per_key, [BLOCK_N]).to(tl.int64)"""
PERKEY = """                phys = tl.load(table + (j // BLOCK_SIZE) * stride_tc, mask=visible,
                               other=0).to(tl.int64)"""
ONE = """        code |= tl.where(bad_len, _BAD_LENGTH, 0)
        tl.atomic_or(err_ptr + b64 * stride_err, code, mask=code != 0)"""
SPLIT = """        tl.atomic_or(err_ptr + b64 * stride_err, _BAD_ENTRY, mask=tl.max(bad_keys, 0) > 0)
        tl.atomic_or(err_ptr + b64 * stride_err, _BAD_LENGTH, mask=bad_len)"""
DEBUG = ONE + """
        dbg = err_ptr + 64 + ((b64 * n_kv_heads + off_hkv) * tl.num_programs(1) + split) * 2
        tl.store(dbg, tl.max(bad_keys, 0))
        tl.store(dbg + 1, code)"""
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def module(name, edits):
    text = SRC
    for a, b in edits:
        if a == b or (a not in text and b in text):
            continue
        assert text.count(a) == 1, (name, a[:60])
        text = text.replace(a, b)
    path = pathlib.Path(f"build/flagbug/pa_{name}.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"pa_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(mod, fold, stages, splits):
    cfg = mod.decode_config
    mod.decode_config = lambda h, e: mod.DecodeConfig(64, 4, stages)
    if DEVICE == "cpu":
        mod.num_sms = lambda device: 132  # the H200's split (19) under the interpreter
    mod.FOLD_MERGE = fold
    lens = [3000, 5000]
    cache = make_cache(lens, 8, 128, 16, dtype=torch.float16, device=DEVICE, extra_columns=0)
    k, v, k_pool, v_pool, table, lens_t = cache
    table[1, 100] = -1
    q = make_q(2, 32, 128, dtype=torch.float16, device=DEVICE)
    fence = spare_block(cache)
    rec = {}
    for name, ln in (("normal", [3000, 5000]), ("over", [3000, 9000])):
        buf = torch.zeros(64 + 2 * 2 * 8 * 19, dtype=torch.int32, device=DEVICE)
        flags = buf[:2]
        mod.paged_decode(q, k_pool, v_pool, fenced(table, fence),
                         torch.tensor(ln, dtype=torch.int32, device=DEVICE), max_context_len=5000,
                         num_splits=splits, return_lse=True, error_flags=flags)
        rec[name] = flags.tolist()
        dbg = buf[64:].view(2, 8, 19, 2)
        rec[name + "_debug_seq1"] = {  # per kv head: the splits whose max(bad_keys) > 0, codes
            "bad_splits": [torch.nonzero(dbg[1, h, :, 0]).flatten().tolist() for h in range(8)],
            "codes": dbg[1, :, :, 1].tolist()}
    mod.decode_config = cfg
    return rec


table_loads = {"blocks": (PERKEY, BLOCKS), "perkey": (BLOCKS, PERKEY)}
flag_forms = {"one": (ONE, ONE), "split": (ONE, SPLIT), "debug": (ONE, DEBUG)}
if DEVICE == "cpu":  # a check of the script, not of the GPU
    matrix = [("blocks", "debug", True, 1, None), ("perkey", "split", True, 1, None)]
else:
    matrix = [(t, f, fold, st, sp) for t, f in itertools.product(table_loads, flag_forms)
              for fold, st, sp in ((True, 3, None), (False, 3, None), (True, 1, None),
                                   (False, 3, 1))]
mods, out = {}, {"device": DEVICE, "torch": torch.__version__, "records": []}
for t, f, fold, stages, splits in matrix:
    if (t, f) not in mods:
        mods[t, f] = module(f"{t}_{f}", [table_loads[t], flag_forms[f]])
    rec = {"table": t, "flag": f, "fold": fold, "stages": stages, "splits": splits,
           **run(mods[t, f], fold, stages, splits)}
    rec["ok"] = rec["normal"] == [0, 1] and rec["over"] == [0, 3]
    out["records"].append(rec)
    print(t, f, "fold", fold, "stages", stages, "splits", splits, "normal", rec["normal"],
          "over", rec["over"], "OK" if rec["ok"] else "LOST", flush=True)
    if f == "debug":
        print("   over, seq 1, per kv head, splits with bad keys:",
              rec["over_debug_seq1"]["bad_splits"], flush=True)
json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "build/flagbug/flagbug.json", "w"),
          indent=1)
