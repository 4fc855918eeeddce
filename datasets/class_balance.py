"""A summary's class balance as one line of text (`gnnsys info`, either kind of dataset)."""

from __future__ import annotations


def class_balance(c: dict) -> str:
    """The `classes` part of a summary as "class:share, ..." (the first 20)."""
    multilabel = c.get("task") == "multilabel"
    totals = [max(1, k) for k in c["labelled"]] if multilabel else [max(1, sum(c["counts"]))] * len(c["counts"])
    balance = ", ".join(f"{i}:{n / t:.1%}" for i, (n, t) in enumerate(zip(c["counts"][:20], totals)))
    if len(c["counts"]) > 20:
        balance += f", ... ({len(c['counts'])} {'tasks' if multilabel else 'classes'})"
    return balance
