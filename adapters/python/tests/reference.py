"""An exact reference in fractions.Fraction, written from the formulas (catalogue section 4, models/*-inl.h,
models/optimizer-inl.h, models/oracle.h), independent of the kit's code: the full-batch oracle."""

from __future__ import annotations

import math
from fractions import Fraction

from accumcheck_adapter import ModelSpec, Scenario, Sequence

Q = Fraction
M = list[list[Fraction]]


def zeros(rows: int, cols: int) -> M:
    return [[Q(0)] * cols for _ in range(rows)]


def coefficients(mode: str, norm_constant: Fraction, seqs: list[Sequence]) -> list[Fraction]:
    """c_i over the scope `seqs`, from the catalogue's definitions."""
    valid = [sum(s.loss_mask) for s in seqs]
    tokens, nonempty = sum(valid), sum(1 for v in valid if v)
    if mode == "token-mean":
        return [Q(1, tokens) if tokens else Q(0) for _ in seqs]
    if mode == "seq-mean-token-sum":
        return [Q(1, nonempty) if v else Q(0) for v in valid]
    if mode == "seq-mean-token-mean":
        return [Q(1, nonempty * v) if v else Q(0) for v in valid]
    if mode == "seq-mean-token-sum-norm":
        return [1 / norm_constant for _ in seqs]
    return [Q(1) for _ in seqs]


def gradient(spec: ModelSpec, p: dict[str, M], seqs: list[Sequence], c: list[Fraction]) -> dict[str, M | None]:
    """dJ/dtheta of J = sum_i c_i sum_t M_it 1/2 |pred - y|^2, None where the C++ model leaves it absent."""
    names = spec.parameter_names()
    g = {n: zeros(r, k) for n, (r, k) in zip(names, spec.parameter_shapes(), strict=True)}
    present = dict.fromkeys(names, False)
    any_token = any(s.token_count for s in seqs)
    for s, ci in zip(seqs, c, strict=True):
        for t in range(s.token_count):
            y = s.exact_targets[t]
            if spec.kind == "linear":
                pre = f"expert{s.expert_index[t]}." if spec.has_experts else ""
                present[pre + "weight"] = present[pre + "bias"] = True
                if not s.loss_mask[t]:
                    continue
                W, b, x = p[pre + "weight"], p[pre + "bias"], s.exact_features[t]
                for o in range(spec.output_size):
                    r = ci * (sum(W[o][k] * x[k] for k in range(len(x))) + b[o][0] - y[o])
                    g[pre + "bias"][o][0] += r
                    for k in range(len(x)):
                        g[pre + "weight"][o][k] += r * x[k]
            elif spec.kind == "mlp":
                for n in names:
                    present[n] = True
                if not s.loss_mask[t]:
                    continue
                W1, b1, W2, b2, x = p["fc1.weight"], p["fc1.bias"], p["fc2.weight"], p["fc2.bias"], s.exact_features[t]
                z = [sum(W1[j][k] * x[k] for k in range(len(x))) + b1[j][0] for j in range(spec.hidden_size)]
                h = [max(zj, Q(0)) for zj in z]
                r = [ci * (sum(W2[o][j] * h[j] for j in range(len(h))) + b2[o][0] - y[o])
                     for o in range(spec.output_size)]
                for o, ro in enumerate(r):
                    g["fc2.bias"][o][0] += ro
                    for j in range(len(h)):
                        g["fc2.weight"][o][j] += ro * h[j]
                for j in range(len(h)):
                    dz = sum(W2[o][j] * r[o] for o in range(len(r))) if z[j] > 0 else Q(0)  # relu'(0) = 0
                    g["fc1.bias"][j][0] += dz
                    for k in range(len(x)):
                        g["fc1.weight"][j][k] += dz * x[k]
            else:
                present["embedding"] = present["bias"] = True
                if not s.loss_mask[t]:
                    continue
                E, b, i = p["embedding"], p["bias"], s.token_ids[t]
                D, V = spec.embed_size, spec.vocab_size
                r = [ci * (sum(E[v][d] * E[i][d] for d in range(D)) + b[v][0] - y[v]) for v in range(V)]
                for v in range(V):
                    g["bias"][v][0] += r[v]
                    for d in range(D):
                        g["embedding"][v][d] += r[v] * E[i][d]  # output projection
                for d in range(D):
                    g["embedding"][i][d] += sum(E[v][d] * r[v] for v in range(V))  # input lookup
    if not any_token and not spec.has_experts:
        present = dict.fromkeys(names, True)
    return {n: (g[n] if present[n] and not spec.is_frozen(n) else None) for n in names}


def norm(grad: dict[str, M | None]) -> float:
    return math.sqrt(sum(x * x for m in grad.values() if m is not None for row in m for x in row))


def oracle(scenario: Scenario) -> dict:
    """Full-batch training: per window the gradient, norm and clip factor, then parameters and state.
    Exact except the square roots (norm, Adam's denominator), taken in float64."""
    spec, opt = scenario.model, scenario.optimizer
    p = {n: [row[:] for row in m] for n, m in scenario.exact_initial_parameters.items()}
    m1: dict[str, M | None] = dict.fromkeys(p)
    m2: dict[str, M | None] = dict.fromkeys(p)
    steps_taken = dict.fromkeys(p, 0)
    out = []
    for s in range(len(scenario.steps)):
        seqs = list(scenario.sequences(s))
        g = gradient(spec, p, seqs, coefficients(scenario.aggregation.mode, scenario.aggregation.norm_constant, seqs))
        n, coef = norm(g), 1.0
        if scenario.max_grad_norm is not None:
            coef = min(1.0, float(scenario.max_grad_norm) / (n + 1e-6))
            if coef < 1:
                g = {k: None if v is None else [[x * Q(coef) for x in row] for row in v] for k, v in g.items()}
        out.append({"gradient": g, "grad_norm": n, "clip_coefficient": coef})
        for name, gm in g.items():
            if gm is None:
                continue
            steps_taken[name] += 1
            t = steps_taken[name]
            theta = p[name]
            for r in range(len(theta)):
                for k in range(len(theta[r])):
                    gv = gm[r][k]
                    if opt.kind == "sgd":
                        d = gv + opt.weight_decay * theta[r][k]
                        if opt.momentum:
                            if m1[name] is None:
                                m1[name] = zeros(len(theta), len(theta[0]))
                            buf = d if t == 1 else opt.momentum * m1[name][r][k] + (1 - opt.dampening) * d
                            m1[name][r][k] = buf
                            d = d + opt.momentum * buf if opt.nesterov else buf
                        theta[r][k] -= opt.lr * d
                        continue
                    if m1[name] is None:
                        m1[name], m2[name] = zeros(len(theta), len(theta[0])), zeros(len(theta), len(theta[0]))
                    if opt.weight_decay:
                        if opt.kind == "adam":
                            gv = gv + opt.weight_decay * theta[r][k]
                        else:
                            theta[r][k] *= 1 - opt.lr * opt.weight_decay
                    m1[name][r][k] = opt.beta1 * m1[name][r][k] + (1 - opt.beta1) * gv
                    m2[name][r][k] = opt.beta2 * m2[name][r][k] + (1 - opt.beta2) * gv * gv
                    denom = math.sqrt(m2[name][r][k]) / math.sqrt(1 - opt.beta2**t) + float(opt.eps)
                    theta[r][k] -= Q(float(opt.lr / (1 - opt.beta1**t)) * float(m1[name][r][k]) / denom)
    return {"steps": out, "parameters": p, "first_moment": m1, "second_moment": m2, "step_count": steps_taken}
