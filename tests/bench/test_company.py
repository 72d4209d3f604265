"""Idle contexts beside a fill's timing (popcorn.bench.company): how many, and a machine without a driver."""

import time

import torch

from popcorn.bench.company import TIMING_COMPANY, company, needed


def test_a_fill_is_topped_up_to_the_company_its_siblings_leave_short():
    assert needed(None, 1) == 0 and needed(torch.device("cpu"), 1) == 0
    if not torch.cuda.is_available():  # NVML cannot list other processes here
        assert needed(torch.device("cuda", 0), 1) == TIMING_COMPANY
        assert needed(torch.device("cuda", 0), 4) == TIMING_COMPANY - 3
        assert needed(torch.device("cuda", 0), TIMING_COMPANY + 1) == 0
        assert needed(torch.device("cuda", 0), 40) == 0


def test_no_company_on_cpu_and_none_where_helpers_cannot_open_a_context():
    with company(torch.device("cpu"), 3) as n:
        assert n == 0
    if torch.cuda.is_available():
        return
    t0 = time.monotonic()
    with company(torch.device("cuda", 0), 2) as n:  # no libcuda here: each helper fails and exits
        assert n == 0
    assert time.monotonic() - t0 < 60  # the helpers that failed were not waited on for READY_S each
