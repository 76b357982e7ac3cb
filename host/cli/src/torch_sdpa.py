"""Times PyTorch SDPA backends, FlashAttention-3 and FlexAttention for `flashrs benchmark
--compare torch`.

Requests on stdin, one JSON document per line (the script answers each in turn, so that a
caller can keep it running and alternate its rows with its own; it exits at the end of input):
  {"dtype": "f16" | "bf16" | "e4m3", "warmup": int, "iters": int, "timing": "call" | "queued",
   "backends": ["flash", "cudnn", "fa3", "flex"], "backward": bool,
   "window": [left, right], "softcap": float, "alibi": bool, "block_sparsity": float,
   "shapes": [{"batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal",
               "head_dim_v" (optional), "inputs", "output" (optional)}, ...]}
"e4m3" asks for FP8 attention: E4M3 Q, K and V (the bf16 inputs rounded) with a bf16 output,
which only "fa3" runs (FlashAttention-3's FP8 forward); any other backend asked answers with an
error rather than timing 16-bit attention.
A shape with "inputs" and "output" (an "e4m3" request asking "fa3") is not timed: FlashAttention-3
runs once on the caller's own E4M3 Q, K and V, read from the file "inputs" (Q's bytes, then K's,
then V's, each contiguous [B, S, H, D], one byte an element), with dequantization factors 1, and
its bf16 output is written to the file "output" (contiguous [B, Sq, Hq, Dv], little-endian), for
the caller to check against its own reference (`flashrs benchmark --dtype e4m3 --verify`); the
result says so with {"call", "output"} instead of times.
A shape's "head_dim_v" is the head dimension of V and the output (absent: "head_dim"); every
backend gets V that wide, and one that refuses it (SDPA's flash backend does, cuDNN and
FlashAttention-3 accept some pairs, e.g. 192 / 128) answers with the error.
"window", "softcap" and "alibi" apply to every shape, as FlashAttention's `window_size` (-1: an
unbounded side) and `softcap` (0: none), and ALiBi with BLOOM's slopes 2^(-8 (h + 1) / heads)
(flashrs's `alibi_slopes`), and "block_sparsity" the fraction of 128-key blocks each query
block skips (0: none); all are optional, defaulting to plain attention. "fa3" takes the
window and softcap, "flex" (FlexAttention, compiled) all four; the caller asks no other backend
when they are set, and any other backend asked answers with an error rather than timing plain
attention. "backends" may be empty (every backend refused the problem): the reply then has only
the info line and empty results.

Reply on stdout, one JSON object per line, each with a "kind" (the reader ignores other lines),
first one of
  {"kind": "unavailable", "reason": str}     torch or a CUDA GPU is missing; nothing follows
  {"kind": "info", "torch": str, "device": str, "cudnn": int | null}
before any request is read, then for each request
  {"kind": "result", "index": int, "backends": {name: {"median_ms", "min_ms", "call"} | {"call", "output"} | {"error": str}}}
for each of its shapes ("index" into its "shapes"), and {"kind": "done"} after the last.
Diagnostics go to stderr.

Timing matches flashrs: `warmup` untimed calls, then `iters` calls each between two CUDA
events, median and minimum in milliseconds (with "backward": the autograd backward of one
forward call, dQ, dK and dV for a random dO, retaining the graph between calls); with timing "queued" each timed call waits behind a
spin kernel (`torch.cuda._sleep`) long enough to cover Python's dispatch, so that the events see
the GPU's work alone. Inputs are standard normal in [B, H, S, D] for SDPA (V's D its
"head_dim_v"), and the same values in FlashAttention's own [B, S, H, D] (contiguous) for
FlashAttention-3, which aligns the causal diagonal to the bottom-right corner and takes fewer
K/V heads natively, as flashrs does.
"""

import json
import math
import sys
import traceback
import warnings

# Request name -> SDPBackend member ("fa3" is FlashAttention-3's own package and "flex"
# torch's FlexAttention, not SDPA backends).
BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "fa3": None, "flex": None}


def emit(obj):
    """Writes one protocol line; flushed so the caller can show progress."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def first_line(text, limit=300):
    """The first line of a message, capped: torch errors can run to pages."""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line[:limit]


# GPU clock cycles `torch.cuda._sleep` spins before a queued call: 0.5-1 ms at H100 clocks,
# beyond the dispatch of an SDPA call and its two events.
HOLD_CYCLES = 1_000_000


def time_call(torch, fn, warmup, iters, queued):
    """(median, fastest) milliseconds of `fn`, timed the way flashrs times its kernels."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        if queued:
            torch.cuda._sleep(HOLD_CYCLES)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    n = len(times)
    median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    return median, times[0]


def candidates(torch, name, shape, q, k, v):
    """(label, call) pairs to try in order; the first the backend accepts is timed.

    GQA: `enable_gqa=True` first, then K/V repeated per query head (outside the timed call)
    where a backend refuses that. Causal with seqlen_q != seqlen_k: flashrs aligns the diagonal
    to the bottom-right corner but SDPA's `is_causal` to the top-left, so those rows call the
    FlashAttention-2 op directly (its causal mask is bottom-right, which is how torch's own
    CausalBias uses it) and give other backends an explicit lower-right boolean mask.
    """
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention
    causal = bool(shape["causal"])
    group = shape["heads_q"] // shape["heads_kv"]
    sq, sk = shape["seqlen_q"], shape["seqlen_k"]
    bottom_right = causal and sq != sk
    mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq) if bottom_right and name != "flash" else None

    def kv_variants():
        if group == 1:
            yield "", k, v, {}
            return
        yield "+enable_gqa", k, v, {"enable_gqa": True}
        yield "+repeat_kv", k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), {}

    for tag, k_, v_, gqa in kv_variants():
        if bottom_right and name == "flash":
            # The op takes K/V with fewer heads natively: it has no enable_gqa to pass.
            op = torch.ops.aten._scaled_dot_product_flash_attention
            label = "aten_flash_op_bottom_right" + {"+enable_gqa": "+native_gqa"}.get(tag, tag)
            yield label, lambda k_=k_, v_=v_: op(q, k_, v_, 0.0, True)[0]
        elif mask is not None:
            yield "sdpa+lower_right_mask" + tag, lambda k_=k_, v_=v_, gqa=gqa: sdpa(q, k_, v_, attn_mask=mask, **gqa)
        else:
            yield "sdpa" + tag, lambda k_=k_, v_=v_, gqa=gqa: sdpa(q, k_, v_, is_causal=causal, **gqa)


def run_backend(torch, name, backend, shape, q, k, v, warmup, iters, queued, backward=False):
    """Times the first call the backend accepts, or says why it accepted none."""
    from torch.nn.attention import sdpa_kernel

    reasons = []
    # sdpa_kernel allows only this backend: a shape it cannot take raises instead of falling
    # back to another backend, and torch's warnings say why.
    with sdpa_kernel(backend):
        for label, call in candidates(torch, name, shape, q, k, v):
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    out = call()
                    if backward:
                        grad = torch.randn_like(out)
                        call = lambda out=out, grad=grad: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
                        call()
                    torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - any refusal makes the backend n/a here
                # torch explains a refusal in warnings; headers like "... not used because:"
                # carry no reason of their own.
                why = [f"{type(e).__name__}: {first_line(e)}"] + [first_line(w.message) for w in caught]
                why = [x for x in dict.fromkeys(why) if x and not x.endswith("because:")]
                reasons.append(label + ": " + "; ".join(why))
                continue
            median, fastest = time_call(torch, call, warmup, iters, queued)
            return {"median_ms": median, "min_ms": fastest, "call": label}
    return {"error": " | ".join(reasons)[:600] or "no call to try"}


def import_fa3():
    """FlashAttention-3's interface (package fa3-fwd) and None, or None and the error result
    that says it is missing."""
    try:
        import fa3_fwd_interface as fa3
    except Exception as e:  # noqa: BLE001
        return None, {"error": f"FlashAttention-3 is not installed (pip package fa3-fwd; {type(e).__name__}: {first_line(e)})"}
    return fa3, None


def load_inputs(torch, path, shape, device="cuda"):
    """The caller's E4M3 Q, K and V from `path` (see the module docstring), on `device`, in
    FlashAttention's [B, S, H, D]: the very bytes the caller ran its own kernel on."""
    b, sq, sk = shape["batch"], shape["seqlen_q"], shape["seqlen_k"]
    d = shape["head_dim"]
    dv = shape.get("head_dim_v") or d
    dims = [(b, sq, shape["heads_q"], d), (b, sk, shape["heads_kv"], d), (b, sk, shape["heads_kv"], dv)]
    counts = [math.prod(x) for x in dims]
    with open(path, "rb") as f:
        # Writable: torch.frombuffer warns on a read-only buffer.
        data = bytearray(f.read())
    if len(data) != sum(counts):
        raise ValueError(f"{path} holds {len(data)} bytes, not the {sum(counts)} of Q, K and V")
    flat = torch.frombuffer(data, dtype=torch.uint8)
    return tuple(t.view(torch.float8_e4m3fn).reshape(x).to(device) for t, x in zip(flat.split(counts), dims))


def write_output(torch, out, path):
    """Writes `out` to `path` as raw bf16, contiguous, little-endian (torch's byte order on the
    GPU hosts it runs on), without numpy: torch copies into the file's buffer itself."""
    host = out.to(torch.bfloat16).contiguous().cpu().reshape(-1)
    raw = bytearray(host.numel() * host.element_size())
    torch.frombuffer(raw, dtype=torch.bfloat16).copy_(host)
    with open(path, "wb") as f:
        f.write(raw)


def check_fa3(torch, shape, inputs, output, window=(-1, -1), softcap=0.0):
    """Runs FlashAttention-3's FP8 forward once on the caller's E4M3 Q, K and V (dequantization
    factors 1, as flashrs's) and writes its bf16 output for the caller to check, or says why it
    cannot; the call is the one `run_fa3` times."""
    fa3, missing = import_fa3()
    if missing:
        return missing
    q, k, v = load_inputs(torch, inputs, shape)
    out = fa3.flash_attn_func(q, k, v, causal=bool(shape["causal"]), window_size=window, softcap=softcap, num_splits=0)
    # Versions before return_attn_probs answered (out, softmax_lse).
    out = out[0] if isinstance(out, tuple) else out
    write_output(torch, out, output)
    del q, k, v, out
    return {"call": "fa3_fwd_interface.flash_attn_func(e4m3)", "output": output}


def answer_inputs(torch, request, shape, window, softcap):
    """The results for a shape that names the caller's inputs: FlashAttention-3 checked on them,
    any other backend refused (the caller asks none)."""
    results = {}
    for name in request["backends"]:
        if name != "fa3" or request["dtype"] != "e4m3":
            results[name] = {"error": "given inputs are for FlashAttention-3's FP8 forward alone (fa3, e4m3)"}
            continue
        try:
            results[name] = check_fa3(torch, shape, shape["inputs"], shape["output"], window, softcap)
        except Exception as e:  # noqa: BLE001 - a refusal, a short file or out of memory
            results[name] = {"error": f"{type(e).__name__}: {first_line(e)}"}
    return results


def run_fa3(torch, shape, q, k, v, warmup, iters, queued, window=(-1, -1), softcap=0.0, fp8=False):
    """Times FlashAttention-3's forward (package fa3-fwd), or says why it cannot run, with the
    request's sliding window and softcap (its own `window_size` and `softcap`). With `fp8`, its
    FP8 forward: the bf16 inputs rounded to E4M3 (dequantization factors 1), a bf16 output."""
    fa3, missing = import_fa3()
    if missing:
        return missing
    if q.dtype != torch.bfloat16:
        return {"error": "the fa3-fwd package has bf16 (and FP8) kernels only"}
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    if fp8:
        qs, ks, vs = (t.to(torch.float8_e4m3fn) for t in (qs, ks, vs))
    causal = bool(shape["causal"])
    # num_splits=0: FA3 chooses its split-KV count (its default, 1, never splits a decode row).
    # Its window is bottom-right aligned like flashrs's, and causal caps its right side at 0.
    call = lambda: fa3.flash_attn_func(qs, ks, vs, causal=causal, window_size=window, softcap=softcap, num_splits=0)
    call()
    torch.cuda.synchronize()
    median, fastest = time_call(torch, call, warmup, iters, queued)
    # The label says which modifications the call took, so a record shows they were passed.
    label = "fa3_fwd_interface.flash_attn_func" + ("(e4m3)" if fp8 else "") + ("+window_size" if window != (-1, -1) else "") + ("+softcap" if softcap else "")
    return {"median_ms": median, "min_ms": fastest, "call": label}


def run_flex(torch, shape, q, k, v, warmup, iters, queued, window=(-1, -1), softcap=0.0, alibi=False, sparsity=0.0, backward=False):
    """Times FlexAttention (`torch.nn.attention.flex_attention`, compiled for the shape) on the
    same problem: the window, with causal masking folded into its right side, as a block mask
    on flashrs's bottom-right diagonal (so that blocks outside it are skipped), softcap and
    ALiBi as a score modification of the scaled scores, as flashrs applies them. Block sparsity:
    each 128-row query block visits as many random 128-key blocks as flashrs's
    (`round((1 - sparsity) * key blocks)`, at least 1), partial ones under the window's mask
    where there is one, else full ones. With `backward`, the autograd backward of one call (its
    compiled backward kernel), as `run_backend` times SDPA's."""
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

    sq, sk, heads = shape["seqlen_q"], shape["seqlen_k"], shape["heads_q"]
    offset = sk - sq
    left, right = window
    if shape["causal"]:
        right = 0 if right < 0 else min(right, 0)

    def mask_mod(b, h, q_idx, kv_idx):
        diag = q_idx + offset
        keep = kv_idx >= 0
        if left >= 0:
            keep = keep & (kv_idx >= diag - left)
        if right >= 0:
            keep = keep & (kv_idx <= diag + right)
        return keep

    masked = left >= 0 or right >= 0
    block_mask = None if not masked else create_block_mask(mask_mod, None, None, sq, sk, device=q.device)
    if sparsity > 0.0:
        q_blocks, kv_blocks = max(1, -(-sq // 128)), max(1, -(-sk // 128))
        visited = max(1, int(math.floor((1.0 - sparsity) * kv_blocks + 0.5)))
        order = torch.rand(1, 1, q_blocks, kv_blocks, device=q.device).argsort(dim=-1).to(torch.int32)
        indices = order[..., :visited].sort(dim=-1).values.contiguous()
        indices = torch.cat([indices, order[..., visited:]], dim=-1).contiguous()
        counts = torch.full((1, 1, q_blocks), visited, device=q.device, dtype=torch.int32)
        if masked:
            block_mask = BlockMask.from_kv_blocks(counts, indices, BLOCK_SIZE=128, mask_mod=mask_mod, seq_lengths=(sq, sk))
        else:
            zeros = torch.zeros_like(counts)
            block_mask = BlockMask.from_kv_blocks(zeros, indices, counts, indices, BLOCK_SIZE=128, seq_lengths=(sq, sk))
    slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / heads) for i in range(heads)], device=q.device, dtype=torch.float32)

    def score_mod(score, b, h, q_idx, kv_idx):
        if softcap:
            score = softcap * torch.tanh(score / softcap)
        if alibi:
            score = score - slopes[h] * (q_idx + offset - kv_idx).abs()
        return score

    modify = score_mod if softcap or alibi else None
    flex = torch.compile(flex_attention, dynamic=False)
    gqa = shape["heads_q"] != shape["heads_kv"]
    call = lambda: flex(q, k, v, score_mod=modify, block_mask=block_mask, enable_gqa=gqa)
    out = call()
    if backward:
        grad = torch.randn_like(out)
        call = lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
        call()
    torch.cuda.synchronize()
    median, fastest = time_call(torch, call, warmup, iters, queued)
    label = "flex_attention" + ("+block_mask" if block_mask is not None else "") + ("+score_mod" if modify else "")
    return {"median_ms": median, "min_ms": fastest, "call": label}


def main():
    """Says which torch runs, then answers each request on its line (see the module docstring)."""
    try:
        import torch
        from torch.nn.attention import SDPBackend
    except Exception as e:  # noqa: BLE001
        emit({"kind": "unavailable", "reason": f"cannot import torch's SDPA API ({type(e).__name__}: {first_line(e)})"})
        return
    if not torch.cuda.is_available():
        emit({"kind": "unavailable", "reason": f"torch {torch.__version__} sees no CUDA GPU"})
        return
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    emit({"kind": "info", "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cudnn": cudnn})
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        if line.strip():
            answer(torch, SDPBackend, json.loads(line))
            emit({"kind": "done"})


def answer(torch, SDPBackend, request):
    """Times every shape of one request on every backend it asks for."""
    # FP8 inputs are drawn in bf16 and rounded where a backend takes them.
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.bfloat16}[request["dtype"]]
    fp8 = request["dtype"] == "e4m3"
    warmup, iters = int(request["warmup"]), int(request["iters"])
    queued = request.get("timing", "call") == "queued"
    backward = bool(request.get("backward", False))
    window = tuple(int(x) for x in request.get("window", [-1, -1]))
    softcap = float(request.get("softcap", 0.0))
    alibi = bool(request.get("alibi", False))
    sparsity = float(request.get("block_sparsity", 0.0))
    modified = window != (-1, -1) or softcap != 0.0 or alibi or sparsity > 0.0
    torch.manual_seed(0)
    for index, shape in enumerate(request["shapes"]):
        results = {}
        if not request["backends"]:
            # Nothing can run this problem: no inputs to allocate.
            emit({"kind": "result", "index": index, "backends": results})
            continue
        if shape.get("inputs"):
            # The caller's inputs, not timed: no random ones to draw.
            results = answer_inputs(torch, request, shape, window, softcap)
            torch.cuda.empty_cache()
            emit({"kind": "result", "index": index, "backends": results})
            continue
        try:
            b, d = shape["batch"], shape["head_dim"]
            dv = shape.get("head_dim_v") or d
            q = torch.randn(b, shape["heads_q"], shape["seqlen_q"], d, device="cuda", dtype=dtype)
            k = torch.randn(b, shape["heads_kv"], shape["seqlen_k"], d, device="cuda", dtype=dtype)
            v = torch.randn(b, shape["heads_kv"], shape["seqlen_k"], dv, device="cuda", dtype=dtype)
            if backward:
                for t in (q, k, v):
                    t.requires_grad_(True)
            for name in request["backends"]:
                if name == "fa3" and backward:
                    results[name] = {"error": "the fa3-fwd package is forward-only"}
                    continue
                if name != "fa3" and fp8:
                    results[name] = {"error": f"{name} takes no FP8 (e4m3) inputs"}
                    continue
                if name not in ("fa3", "flex") and modified:
                    # SDPA has no window, softcap or ALiBi: timing it would time another problem.
                    results[name] = {"error": f"SDPA's {name} backend takes no sliding window, softcap, ALiBi or block mask"}
                    continue
                if name == "fa3" and (alibi or sparsity > 0.0):
                    results[name] = {"error": "FlashAttention-3 takes no ALiBi or block mask"}
                    continue
                if name == "flex":
                    try:
                        results[name] = run_flex(torch, shape, q, k, v, warmup, iters, queued, window, softcap, alibi, sparsity, backward)
                    except Exception as e:  # noqa: BLE001 - a compile failure or out of memory
                        results[name] = {"error": f"{type(e).__name__}: {first_line(e)}"}
                    continue
                if name == "fa3":
                    try:
                        results[name] = run_fa3(torch, shape, q, k, v, warmup, iters, queued, window, softcap, fp8)
                    except Exception as e:  # noqa: BLE001 - a refusal or out of memory
                        results[name] = {"error": f"{type(e).__name__}: {first_line(e)}"}
                    continue
                backend = getattr(SDPBackend, BACKENDS.get(name) or "", None)
                if backend is None:
                    results[name] = {"error": f"torch {torch.__version__} has no SDPBackend for '{name}'"}
                    continue
                try:
                    results[name] = run_backend(torch, name, backend, shape, q, k, v, warmup, iters, queued, backward)
                except Exception as e:  # noqa: BLE001 - e.g. out of memory while timing
                    results[name] = {"error": f"{type(e).__name__}: {first_line(e)}"}
            del q, k, v
        except Exception as e:  # noqa: BLE001 - e.g. out of memory for the inputs
            for name in request["backends"]:
                results.setdefault(name, {"error": f"{type(e).__name__}: {first_line(e)}"})
        torch.cuda.empty_cache()
        emit({"kind": "result", "index": index, "backends": results})


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001 - report, and let the caller keep what it already got
        traceback.print_exc()
        sys.exit(1)
