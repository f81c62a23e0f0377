"""Greedy decoding speed of tt.llm.Generator against onnxruntime (the same file, the same threads)
and PyTorch eager (the same model, the same threads): prefill tokens/s, decode tokens/s and
peak RSS, for a Llama-style model (12 layers, hidden 768, 12 query and 4 key/value heads,
vocabulary 32k) and GPT-2 (small config), random weights, in FP32 and with INT4 weights
(tt.quantize.weight_only, block 32, MatMulNBits, which onnxruntime runs too).

One prompt of 32 random tokens, 64 new tokens (the prefill gives the first, 63 decode steps the
rest); each engine runs in a process of its own, so its peak RSS is its own; the best of
``--repeats`` generations, each after a pause of IDLE_S seconds (so that the threads of the
engine that ran before, which spin for a while after a run, do not take this one's cores).
tether's tokens must equal onnxruntime's (the script stops
otherwise; PyTorch's are reported, since it runs a different summation order than the file).
Then tether's profiler on the decode steps: the op types that take its time.

Usage:
    python bench/llm.py [--quick] [--threads 1,2] [--models llama,gpt2] [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

PROMPT, NEW = 32, 64
IDLE_S = 0.5  # the pause before each timed generation (see worker)


def _config(arch: str, quick: bool) -> Any:
    import transformers

    layers = 2 if quick else 12
    if arch == "llama":
        return transformers.LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=layers,
                                        num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                                        max_position_embeddings=256, tie_word_embeddings=False)
    return transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257, n_positions=256)


def _model(arch: str, quick: bool) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    cls = transformers.LlamaForCausalLM if arch == "llama" else transformers.GPT2LMHeadModel
    return cls(_config(arch, quick)).eval()


def _rss_mb() -> float:
    """This process's peak RSS: VmHWM starts afresh at exec, where ru_maxrss keeps the parent's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(steps: Any) -> tuple[list[int], float, float]:
    """Runs a generation (an iterator of tokens): its tokens, the prefill's and the decode's seconds."""
    tokens: list[int] = []
    start = time.perf_counter()
    first = 0.0
    for tok in steps:
        tokens.append(int(tok))
        if len(tokens) == 1:
            first = time.perf_counter()
    return tokens, first - start, time.perf_counter() - first


def _ort_steps(sess: Any, prompt: Any) -> Any:
    """Greedy decoding with an onnxruntime session of the file, fed as tt.llm.Generator feeds it."""
    import numpy as np

    names = [i.name for i in sess.get_inputs()]
    past_in = [n for n in names if n.startswith("past_key_values.")]
    present = [n.replace("past_key_values.", "present.") for n in past_in]
    shapes = {i.name: i.shape for i in sess.get_inputs()}
    past = [np.zeros((1, shapes[n][1], 0, shapes[n][3]), np.float32) for n in past_in]
    ids = np.asarray([prompt], np.int64)
    length = ids.shape[1]
    for _ in range(NEW):
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, length), np.int64)}
        if "position_ids" in names:
            feeds["position_ids"] = np.arange(length - ids.shape[1], length, dtype=np.int64)[None]
        feeds.update(zip(past_in, past, strict=True))
        out = sess.run(["logits", *present], feeds)
        tok = int(out[0][0, -1].argmax())
        yield tok
        past, ids, length = out[1:], np.asarray([[tok]], np.int64), length + 1


def _torch_steps(model: Any, prompt: list[int]) -> Any:
    import torch

    with torch.no_grad():
        ids, cache = torch.tensor([prompt]), None
        for _ in range(NEW):
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tok = int(out.logits[0, -1].argmax())
            yield tok
            ids = torch.tensor([[tok]])


def _profile(path: str, threads: int, prompt: list[int]) -> list[tuple[str, float]]:
    """Share of tether's decode kernel time per op type (the prefill's run left out)."""
    import tether as tt

    sess = tt.compile(path, threads=threads, profile=True)
    stream = tt.llm.Generator(sess).stream([prompt], NEW)
    next(stream)
    before = {p["name"]: p["seconds"] for p in sess.profile()}
    for _ in stream:
        pass
    per_op: dict[str, float] = defaultdict(float)
    for p in sess.profile():
        per_op[p["op_type"]] += p["seconds"] - before.get(p["name"], 0.0)
    total = sum(per_op.values()) or 1.0
    return sorted(((op, s / total) for op, s in per_op.items()), key=lambda x: -x[1])


def _runner(engine: str, job: dict[str, Any]) -> Any:
    """A function that starts a generation of ``engine`` on the job's file: an iterator of tokens."""
    threads, prompt = job["threads"], job["prompt"]
    if engine == "tether":
        import tether as tt

        gen = tt.llm.Generator(tt.compile(job["file"], threads=threads))
        return lambda: (int(t[0]) for t in gen.stream([prompt], NEW))
    if engine == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        sess = ort.InferenceSession(job["file"], opts, providers=["CPUExecutionProvider"])
        return lambda: _ort_steps(sess, prompt)
    import torch

    torch.set_num_threads(threads)
    model = _model(job["arch"], job["quick"])
    return lambda: _torch_steps(model, prompt)


def worker(job: dict[str, Any]) -> dict[str, Any]:
    """The job's engines on one file, their generations interleaved (so a change of the machine's
    load hits each alike), the best of ``repeats`` per engine. With one engine the process holds
    only that engine, so its peak RSS is that engine's."""
    runs = {engine: _runner(engine, job) for engine in job["engines"]}
    best: dict[str, tuple[list[int], float, float]] = {}
    for _ in range(job["repeats"]):
        for engine, run in runs.items():
            # The engine before may leave threads spinning for a while after its last run
            # (onnxruntime's pool and OpenMP's both do): they would take cores from this one's
            # prefill. A pause lets them go idle.
            time.sleep(IDLE_S)
            got = _timed(run())
            if engine not in best or sum(got[1:]) < sum(best[engine][1:]):
                best[engine] = got
    result: dict[str, Any] = {e: {"tokens": t, "prefill_s": p, "decode_s": d} for e, (t, p, d) in best.items()}
    result["rss_mb"] = _rss_mb()
    if job.get("profile"):
        result["profile"] = _profile(job["file"], job["threads"], job["prompt"])
    return result


def _spawn(job: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS=str(job["threads"]), OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{job['engines']} on {job['file']} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _export(arch: str, quick: bool, folder: Path) -> dict[str, str]:
    """The model exported with its KV cache (FP32) and its INT4 weight-only form: precision -> path."""
    import tether as tt

    fp32, int4 = folder / f"{arch}.fp32.onnx", folder / f"{arch}.int4.onnx"
    if not fp32.exists():
        tt.export.transformers(_model(arch, quick), fp32, check=False, golden=False)
    if not int4.exists():
        tt.quantize.weight_only(str(fp32), bits=4, block_size=32).save(int4)
    return {"FP32": str(fp32), "INT4": str(int4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 layers instead of 12")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--models", default="llama,gpt2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="", help="where the exported files go (kept, and reused when present)")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    import numpy as np
    import onnxruntime as ort
    import tether as tt
    import torch

    info = tt.cpu_info()
    print(f"{info['brand']}, {info['isa']}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"onnxruntime {ort.__version__}, torch {torch.__version__}, Python {platform.python_version()}")
    print(f"greedy, batch 1, prompt {PROMPT} tokens, {NEW} new tokens; best of {args.repeats}; "
          f"{'2 layers (--quick)' if args.quick else '12 layers'}")
    folder = Path(args.dir or tempfile.mkdtemp(prefix="tether-llm-"))
    folder.mkdir(parents=True, exist_ok=True)
    header = (f"{'model':6s} {'weights':7s} {'thr':>3s} {'engine':11s} {'prefill tok/s':>13s} {'decode tok/s':>12s} "
              f"{'vs ort':>6s} {'peak RSS MB':>11s}  tokens")
    profiles: dict[tuple[str, str], list[tuple[str, float]]] = {}
    rss: dict[tuple[str, str, str], float] = {}
    for arch in args.models.split(","):
        files = _export(arch, args.quick, folder)
        vocab = _config(arch, args.quick).vocab_size
        prompt = [int(t) for t in np.random.default_rng(0).integers(0, vocab, PROMPT)]
        print(header)
        for threads in [int(t) for t in args.threads.split(",")]:
            for precision, path in files.items():
                job = {"file": path, "arch": arch, "quick": args.quick, "threads": threads, "prompt": prompt}
                timing = _spawn(job | {"engines": ["onnxruntime", "tether"], "repeats": args.repeats,
                                       "profile": threads == 1})
                rows = {e: timing[e] for e in ("onnxruntime", "tether")}
                if precision == "FP32":
                    rows["torch"] = _spawn(job | {"engines": ["torch"], "repeats": args.repeats})["torch"]
                if threads == 1:  # peak RSS, one engine per process, one generation
                    for engine in rows:
                        rss[(arch, precision, engine)] = _spawn(job | {"engines": [engine], "repeats": 1})["rss_mb"]
                if "profile" in timing:
                    profiles[(arch, precision)] = timing["profile"]
                ref = rows["onnxruntime"]
                if rows["tether"]["tokens"] != ref["tokens"]:
                    bad = next(i for i, (a, b) in enumerate(zip(rows["tether"]["tokens"], ref["tokens"], strict=True))
                               if a != b)
                    raise SystemExit(f"{arch} {precision}: tether's token {bad} differs from onnxruntime's")
                for engine, r in rows.items():
                    same = "= ort" if r["tokens"] == ref["tokens"] else "differ"
                    ratio = (NEW - 1) / r["decode_s"] / ((NEW - 1) / ref["decode_s"])
                    peak = rss.get((arch, precision, engine), float("nan"))
                    print(f"{arch:6s} {precision:7s} {threads:3d} {engine:11s} {PROMPT / r['prefill_s']:13.1f} "
                          f"{(NEW - 1) / r['decode_s']:12.1f} {ratio:6.2f} {peak:11.0f}  "
                          f"{same}")
    print("\ntether's decode time by op type (1 thread):")
    for (arch, precision), shares in profiles.items():
        top = ", ".join(f"{op} {share:.0%}" for op, share in shares[:6])
        print(f"  {arch} {precision}: {top}")


if __name__ == "__main__":
    main()
