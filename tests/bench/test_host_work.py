"""The host-work instruments of benchmarks/host_overhead.py (viasd_adapt.bench.host_work): the
synchronisation counter counts what it should, apart inside forwards, in worker threads too; the
forward timer sees the compute modules and leaves no hook behind."""

from __future__ import annotations

import threading

import torch

from tests.support.pairs import truncated_pair
from viasd_adapt.adapters.hf.loop import criteria_beyond_the_loop
from viasd_adapt.bench.host_work import compute_modules, counting_syncs, timing_forwards


def test_the_counter_counts_each_item_call_and_nothing_else():
    t = torch.arange(6)
    with counting_syncs() as counter:
        for i in range(5):
            t[i].item()
        (t + 1).sum()  # device work with no host read
    assert counter.loop == 5 and counter.by_name == {"item": 5}
    # control: without the reads, nothing is counted
    with counting_syncs() as quiet:
        (t + 1).sum()
    assert quiet.loop == 0


def test_every_kind_of_host_read_is_counted():
    t = torch.tensor([0.0, 2.0])
    with counting_syncs() as counter:
        t.tolist()
        bool(t[1])
        int(t[1])
        float(t[1])
        t.nonzero()
        if t[1] > 0:  # a Python branch on a tensor
            pass
    assert counter.by_name == {"tolist": 1, "__bool__": 2, "__int__": 1, "__float__": 1, "nonzero": 1}


def test_reads_inside_a_forward_are_counted_apart_and_worker_threads_count():
    tiny = truncated_pair("llama", layers=2)
    head = tiny.target.get_output_embeddings()
    handle = head.register_forward_hook(lambda module, args, out: out[0, -1, 0].item())
    try:
        with timing_forwards(tiny.target) as forwards, counting_syncs(forwards) as counter:
            with torch.no_grad():
                tiny.target(torch.tensor([[1, 2, 3]]))
            worker = threading.Thread(target=lambda: torch.ones(1).item())
            worker.start()
            worker.join()
    finally:
        handle.remove()
    assert counter.in_forwards["item"] == 1  # the hook's read, inside the head's forward
    assert counter.by_name == {"item": 1}  # the worker thread's, outside any forward
    assert forwards.seconds > 0 and forwards.calls == len(compute_modules(tiny.target))
    assert threading.Thread.run.__name__ == "run"  # restored


def test_the_timer_leaves_no_hook_behind():
    tiny = truncated_pair("llama", layers=2)
    modules = compute_modules(tiny.target)
    assert tiny.target.get_output_embeddings() in modules and len(modules) >= 2 + 2  # layers, embeddings, head
    with timing_forwards(tiny.target):
        assert all(m._forward_pre_hooks for m in modules)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in modules)


def test_the_hf_loop_keeps_every_stopping_criterion_but_the_two_it_applies_itself():
    from transformers.generation.stopping_criteria import (EosTokenCriteria, MaxLengthCriteria, MaxTimeCriteria,
                                                           StoppingCriteriaList)

    class OwnLength(MaxLengthCriteria):
        """A subclass may have its own rule: kept."""

    timed, own = MaxTimeCriteria(10.0), OwnLength(5)
    given = StoppingCriteriaList([MaxLengthCriteria(5), EosTokenCriteria(1), timed, own])
    assert list(criteria_beyond_the_loop(given)) == [timed, own]
    assert not criteria_beyond_the_loop(StoppingCriteriaList([MaxLengthCriteria(5), EosTokenCriteria(1)]))
    assert not criteria_beyond_the_loop(None)
