"""A complete exact adapter in standard-library Python (docs/adapter-protocol.md section 8): the linear model
without experts, plain SGD, `sum` and `token-mean`, one rank, computed in fractions.Fraction and answered in
rational strings "n/d". Try: accumcheck fuzz --adapter-command "python3 adapters/examples/minimal_adapter.py"."""
import json
import sys
from fractions import Fraction as Q

CAPABILITIES = {
    "models": ["linear"], "experts": False, "frozen_parameters": True, "aggregations": ["sum", "token-mean"],
    "optimizers": ["sgd"], "momentum": False, "weight_decay": False, "clipping": False, "world_sizes": [1],
    "zero_stages": [0], "offload": [False], "dtypes": ["exact"], "precisions": ["full"], "loss_scaling": False,
    "boundary": ["automatic", "manual"], "step_after_every_backward": [True, False], "uneven_windows": True,
    "checkpoint": True,  # the whole state is the parameters: resuming changes nothing
    "reports": {"applied_gradient": True, "grad_norm": False, "clip_coefficient": False, "optimizer_state": True},
    "missing_gradient_is_zero": False,
    "limits": {"rank_count_max": 1, "step_count_max": 8, "micro_batch_count_max": 8, "token_count_max": 256}}


def matrix(rows):
    return [[Q(x) for x in row] for row in rows]


def text(m):
    return None if m is None else [[str(x) for x in row] for row in m]


def run(msg):
    """Full-batch SGD on every window: the gradient of sum_i c_i sum_t M_it 1/2 |W x_t + b - y_t|^2."""
    sc = msg["scenario"]
    lr, mode = Q(sc["training"]["optimizer"]["lr"]), sc["training"]["aggregation"]["mode"]
    frozen = sc["training"]["model"].get("frozen", [])
    W, b = matrix(sc["initial_parameters"]["weight"]), matrix(sc["initial_parameters"]["bias"])
    steps, stepped = [], 0
    for window in sc["steps"]:
        seqs = [seq for ranks in window for rank in ranks for seq in rank]
        n = sum(sum(seq["loss_mask"]) for seq in seqs)
        c = Q(1) if mode == "sum" else (Q(1, n) if n else Q(0))
        dW, db = [[Q(0)] * len(W[0]) for _ in W], [[Q(0)] for _ in b]
        for seq in seqs:
            for x, y, m in zip(matrix(seq["features"]), matrix(seq["targets"]), seq["loss_mask"], strict=False):
                for o in range(len(W)):
                    r = m * c * (sum(W[o][i] * x[i] for i in range(len(x))) + b[o][0] - y[o])
                    db[o][0] += r
                    for i in range(len(x)):
                        dW[o][i] += r * x[i]
        grads = {"weight": None if "weight" in frozen else dW, "bias": None if "bias" in frozen else db}
        for p, g in ((W, grads["weight"]), (b, grads["bias"])):
            for row, grow in zip(p, g or [], strict=False):
                row[:] = [v - lr * gv for v, gv in zip(row, grow, strict=False)]
        stepped += 1
        steps.append({"applied": True, "gradient": {k: text(g) for k, g in grads.items()},
                      "grad_norm": None, "clip_coefficient": None})
    counts = {k: 0 if k in frozen else stepped for k in ("weight", "bias")}
    return {"type": "result", "id": msg["id"], "steps": steps, "parameters": {"weight": text(W), "bias": text(b)},
            "optimizer_state": {"first_moment": {"weight": None, "bias": None},
                                "second_moment": {"weight": None, "bias": None}, "step_count": counts}}


def hello(msg):
    if msg.get("protocol") != 1:
        return {"type": "error", "id": msg.get("id"), "kind": "protocol", "message": "this adapter speaks protocol 1"}
    return {"type": "hello", "id": msg["id"], "protocol": 1, "capabilities": CAPABILITIES,
            "adapter": {"name": "minimal", "version": "1", "description": "exact SGD loop"}}


def main():
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["type"] == "hello":
            reply = hello(msg)
        elif msg["type"] == "run":
            try:
                reply = run(msg)
            except Exception as e:  # a failing trial is a reply; the adapter keeps serving
                reply = {"type": "error", "id": msg.get("id"), "kind": "failed", "message": repr(e)}
        else:
            break
        print(json.dumps(reply), flush=True)
        if reply["type"] == "error" and reply["kind"] == "protocol":
            break


if __name__ == "__main__":
    main()
