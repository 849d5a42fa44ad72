#!/usr/bin/python3
"""Property 1 ("the accumulated update equals the full-batch update") as a Hypothesis + PyTorch test.

This is the peer that accumcheck's trials per second are measured against (bench/throughput.py). It is written
the way a Python engineer would write the property with the usual tools, not as a straw man: Hypothesis draws
the data and the split, PyTorch computes the gradients with autograd, and gradient accumulation is PyTorch's own
mechanism (.grad accumulates across backward calls).

Model and loss, the linear model of models/linear_model.h with one expert:
  y_hat_t = W x_t + b            W [O, I], b [O], x_t [I], I = 4, O = 2
  l_t     = 1/2 |y_hat_t - y_t|^2
  J       = sum_i sum_t M_it l_it / N      (token-mean over the whole batch; N = sum of M_it, clamped to >= 1)
Tensor legend: B sequences (1..12), T = longest sequence (0..6 tokens), padded batch X [B, T, I], Y [B, T, O],
mask M [B, T] = (t < length_i) and loss_mask_it.

The property: split the B sequences into G contiguous micro-batches (G in 1..4, empty ones allowed), back-propagate
each micro-batch loss sum_{i in k} sum_t M_it l_it / N (N counted over the whole window, so the sum of the
micro-batch losses is J), and check that the accumulated gradient equals the gradient of J from one backward,
in float64 with torch.allclose at a tight tolerance.

Usage:
  /usr/bin/python3 bench/peer/hypothesis_property1.py [--trials N] [--seed S]   # prints one JSON line
  /usr/bin/python3 bench/peer/hypothesis_property1.py --self-test               # exit 0 if the canary is caught
"""
import argparse
import json
import sys
import time

import hypothesis
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import torch
from hypothesis import given, seed, settings

INPUT_SIZE = 4
OUTPUT_SIZE = 2
SEQUENCE_COUNT_MAX = 12
TOKEN_COUNT_MAX = 6
MICRO_BATCH_COUNT_MAX = 4
VALUE_ABS_MAX = 4.0

# Float64 sums of the same terms in a different order agree to a few ulps of the largest partial sum. A gradient
# entry here is at most about 4 * (4 * 4 * 4 + 4 + 4) = 288 (|x| <= 4, |y_hat - y| <= 72), so 1e-9 is still
# thousands of ulps of the largest one: no false alarms. A dropped or double-counted micro-batch moves the
# gradient by that micro-batch's own contribution, caught whenever it exceeds 1e-9; Hypothesis shrinks a
# failure toward values like 0 and 1, where it is of order 1.
RTOL = 1e-9
ATOL = 1e-9

values = st.floats(min_value=-VALUE_ABS_MAX, max_value=VALUE_ABS_MAX, allow_nan=False, allow_infinity=False)


@st.composite
def cases(draw):
    """One scenario: initial parameters, a padded batch with its mask, and the micro-batch boundaries."""
    sequence_count = draw(st.integers(1, SEQUENCE_COUNT_MAX))
    lengths = draw(st.lists(st.integers(0, TOKEN_COUNT_MAX), min_size=sequence_count, max_size=sequence_count))
    token_count_max = max(lengths)
    shape = (sequence_count, token_count_max)
    x = draw(hnp.arrays("float64", shape + (INPUT_SIZE,), elements=values))
    y = draw(hnp.arrays("float64", shape + (OUTPUT_SIZE,), elements=values))
    loss_mask = draw(hnp.arrays("bool", shape))
    weight = draw(hnp.arrays("float64", (OUTPUT_SIZE, INPUT_SIZE), elements=values))
    bias = draw(hnp.arrays("float64", (OUTPUT_SIZE,), elements=values))
    micro_batch_count = draw(st.integers(1, MICRO_BATCH_COUNT_MAX))
    cuts = sorted(draw(st.lists(st.integers(0, sequence_count), min_size=micro_batch_count - 1,
                                max_size=micro_batch_count - 1)))
    in_length = torch.arange(token_count_max)[None, :] < torch.tensor(lengths)[:, None]
    return {
        "x": torch.from_numpy(x),
        "y": torch.from_numpy(y),
        "mask": (in_length & torch.from_numpy(loss_mask)).to(torch.float64),
        "weight": torch.from_numpy(weight),
        "bias": torch.from_numpy(bias),
        "boundaries": [0] + cuts + [sequence_count],
    }


def masked_token_loss_sum(weight, bias, x, y, mask):
    """sum_i sum_t M_it * 1/2 |W x_it + b - y_it|^2 over the given sequences."""
    y_hat = x @ weight.T + bias
    return (0.5 * ((y_hat - y) ** 2).sum(-1) * mask).sum()


def full_batch_gradient(case):
    weight = case["weight"].clone().requires_grad_()
    bias = case["bias"].clone().requires_grad_()
    valid_token_count = case["mask"].sum().clamp(min=1)
    loss = masked_token_loss_sum(weight, bias, case["x"], case["y"], case["mask"]) / valid_token_count
    loss.backward()
    return weight.grad, bias.grad


def accumulated_gradient(case, drop_middle_micro_batch):
    weight = case["weight"].clone().requires_grad_()
    bias = case["bias"].clone().requires_grad_()
    # The correct normaliser is the window-global count, known before the first micro-batch runs.
    valid_token_count = case["mask"].sum().clamp(min=1)
    boundaries = case["boundaries"]
    micro_batch_count = len(boundaries) - 1
    for k in range(micro_batch_count):
        if drop_middle_micro_batch and micro_batch_count >= 3 and k == micro_batch_count // 2:
            continue  # the injected bug of --self-test, after DeepSpeed's dropped intermediate micro-batches
        lo, hi = boundaries[k], boundaries[k + 1]
        loss = masked_token_loss_sum(weight, bias, case["x"][lo:hi], case["y"][lo:hi], case["mask"][lo:hi])
        (loss / valid_token_count).backward()
    if weight.grad is None:  # every micro-batch was skipped: nothing accumulated
        return torch.zeros_like(weight), torch.zeros_like(bias)
    return weight.grad, bias.grad


def make_test(max_examples, root_seed, drop_middle_micro_batch, counter):
    """Property 1 as a Hypothesis test. counter["trials"] counts executed examples (shrinking included) and
    counter["first_failure"] records the example number of the first failure."""

    @seed(root_seed)
    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True)
    @given(cases())
    def accumulated_update_equals_full_batch_update(case):
        counter["trials"] += 1
        expected_weight, expected_bias = full_batch_gradient(case)
        actual_weight, actual_bias = accumulated_gradient(case, drop_middle_micro_batch)
        equal = (torch.allclose(actual_weight, expected_weight, rtol=RTOL, atol=ATOL)
                 and torch.allclose(actual_bias, expected_bias, rtol=RTOL, atol=ATOL))
        if not equal and counter.get("first_failure") is None:
            counter["first_failure"] = counter["trials"]  # before Hypothesis starts shrinking
        assert equal, (f"the accumulated gradient differs from the full-batch gradient: "
                       f"dW expected (full batch) {expected_weight.tolist()}, actual (accumulated) {actual_weight.tolist()}; "
                       f"db expected {expected_bias.tolist()}, actual {actual_bias.tolist()}; "
                       f"boundaries {case['boundaries']}")

    return accumulated_update_equals_full_batch_update


def run_benchmark(trials, root_seed):
    counter = {"trials": 0}
    test = make_test(trials, root_seed, drop_middle_micro_batch=False, counter=counter)
    start, cpu_start = time.perf_counter(), time.process_time()
    test()  # raises (and exits nonzero) if the correct accumulation ever disagrees: then the figure is void
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    print(json.dumps({
        "peer": "hypothesis+pytorch",
        "trials": counter["trials"],
        "seconds": round(seconds, 3),
        "trials_per_second": round(counter["trials"] / seconds, 1),
        "torch": torch.__version__,
        "hypothesis": hypothesis.__version__,
        # Beyond the contract: on a shared box wall time includes waiting for a core; CPU time does not.
        "cpu_seconds": round(cpu_seconds, 3),
    }))
    return 0


def run_self_test(trials, root_seed):
    """The canary: with the middle micro-batch dropped for G >= 3, Hypothesis must find a failure."""
    counter = {"trials": 0, "first_failure": None}
    test = make_test(trials, root_seed, drop_middle_micro_batch=True, counter=counter)
    start = time.perf_counter()
    try:
        test()
    except AssertionError as failure:
        seconds = time.perf_counter() - start
        print(f"self-test: Hypothesis found the injected bug (middle micro-batch dropped when G >= 3) at example "
              f"{counter['first_failure']}, {counter['trials']} examples in all with shrinking, {seconds:.1f} s; "
              f"shrunk failure: {failure}", file=sys.stderr)
        return 0
    print(f"self-test: FAILED, Hypothesis did not find the injected bug in {counter['trials']} examples "
          f"(seed {root_seed}); the peer is not testing property 1", file=sys.stderr)
    return 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="Hypothesis max_examples (default 2000)")
    parser.add_argument("--seed", type=int, default=1, help="Hypothesis seed (default 1)")
    parser.add_argument("--self-test", action="store_true",
                        help="inject a bug (drop the middle micro-batch when G >= 3); exit 0 if Hypothesis finds it")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error(f"--trials must be at least 1, got {args.trials}")
    # One core: the figure is compared with accumcheck --jobs 1.
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    if args.self_test:
        return run_self_test(args.trials, args.seed)
    return run_benchmark(args.trials, args.seed)


if __name__ == "__main__":
    sys.exit(main())
