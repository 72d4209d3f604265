"""The plan's coverage profile: a strength-2 covering array over an op's axes (a deterministic IPOG).

Every value and every pair of values of two axes appears in :func:`coverage_rows`, before repair
(which may merge rows).
"""

from __future__ import annotations

import functools

from .axes import coverage_axes

_FREE = -1  # a position no pair needs yet ("don't care"); whatever is left free ends as 0


def covering_rows(sizes) -> list[tuple[int, ...]]:
    """Index rows covering every value pair of every two axes: all-first, the IPOG array, all-last.

    A deterministic in-parameter-order (IPOG) greedy build: no randomness, no hashing, and no
    decision depends on set iteration order. Memoized by ``sizes``: many ops share a signature.
    """
    return list(_covering(tuple(int(s) for s in sizes)))


@functools.lru_cache(maxsize=256)
def _covering(sizes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    if not sizes:
        return ((),)
    if len(sizes) == 1:
        return ((0,),) + tuple((v,) for v in range(sizes[0])) + ((sizes[0] - 1,),)
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))  # largest first, ties by position
    out = []
    for row in _ipog([sizes[i] for i in order]):
        full = [0] * len(sizes)
        for pos, i in enumerate(order):
            full[i] = row[pos]
        out.append(tuple(full))
    return tuple(out)


def _ipog(sizes: list[int]) -> list[tuple[int, ...]]:
    """A strength-2 covering array over ``sizes`` (largest first, at least two axes).

    The all-first and all-last rows are fixed bookends (first and last in the result) and count
    toward coverage. The rest starts as the product of the two largest axes (less the two pairs the
    bookends already hold). Each further axis then grows horizontally: every row takes the value
    covering the most still-uncovered pairs (ties cyclically after the last value chosen), or stays
    free there when no value covers any. Then vertically: each pair still uncovered, in axis/value
    order, goes into a row free where it needs to be (one already holding a side of the pair
    first, then the earliest), else into a new row free everywhere else. Positions still free at
    the end become 0. Uncovered pairs are kept as per-(axis, value) bitmasks over the new axis'
    values, so nothing depends on hashing or set order.
    """
    n = len(sizes)
    first, last = [0] * n, [s - 1 for s in sizes]
    rows = [[a, b] + [_FREE] * (n - 2) for a in range(sizes[0]) for b in range(sizes[1])
            if [a, b] != first[:2] and [a, b] != last[:2]]
    for p in range(2, n):
        s = sizes[p]
        full = (1 << s) - 1
        unc = [[full] * sizes[q] for q in range(p)]  # unc[q][x]: bit v set while (q=x, p=v) is uncovered
        left = s * sum(sizes[:p])

        def cover(r):  # mark every pair of r that involves axis p as covered
            nonlocal left
            v, got = r[p], 0
            if v == _FREE:
                return
            bit = 1 << v
            for q in range(p):
                x = r[q]
                if x != _FREE and unc[q][x] & bit:
                    unc[q][x] &= ~bit
                    got += 1
            left -= got

        cover(first)
        cover(last)
        # horizontal growth; ties go to the first value at or after the one last chosen, cyclically,
        # which spreads values like (a + b) mod s and makes the product seed cover the axis outright
        nxt = 0
        for r in rows:
            if not left:
                break
            gain = [0] * s
            for q in range(p):
                x = r[q]
                if x == _FREE:
                    continue
                m = unc[q][x]
                while m:
                    low = m & -m
                    gain[low.bit_length() - 1] += 1
                    m ^= low
            best = max(gain)
            if best:
                r[p] = next(v for v in (*range(nxt, s), *range(nxt)) if gain[v] == best)
                nxt = (r[p] + 1) % s
                cover(r)
        # vertical growth: only rows with a free position can take a pair; new rows are free elsewhere
        loose = [r for r in rows if _FREE in r[:p + 1]]
        for q in range(p):
            for w in range(sizes[q]):
                for v in range(s):
                    if not (unc[q][w] >> v) & 1:
                        continue
                    slot, rank = None, 3
                    for r in loose:  # prefer a row already holding one side of the pair, then the earliest
                        a, b = r[q], r[p]
                        if (a == w or a == _FREE) and (b == v or b == _FREE):
                            k = 2 if a == b == _FREE else (0 if b == v else 1)
                            if k < rank:
                                slot, rank = r, k
                                if k == 0:
                                    break
                    if slot is None:
                        slot = [_FREE] * n
                        rows.append(slot)
                        loose.append(slot)
                    slot[q], slot[p] = w, v
                    cover(slot)
    body, seen = [], {tuple(first), tuple(last)}
    for r in rows:  # free positions -> 0; a row that duplicates another (or a bookend) adds nothing
        t = tuple(0 if x == _FREE else x for x in r)
        if t not in seen:
            seen.add(t)
            body.append(t)
    return [tuple(first)] + body + [tuple(last)]


def coverage_rows(op) -> list[dict]:
    """The covering array of ``op`` as {axis: value} rows, before building and repair."""
    axes = coverage_axes(op)
    return [{name: pool[i] for (name, pool), i in zip(axes, row)}
            for row in covering_rows([len(pool) for _, pool in axes])]
