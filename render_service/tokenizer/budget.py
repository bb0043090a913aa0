"""How much text a step running on the event loop may encode anew.

A render runs on the event loop when it looks small (http: a small body, or an agent's
next turn whose history was parsed before): the hand-off to a pool thread costs more than
the render (0.3-0.5 ms of a late agent turn). What looks small may still encode a long
text: a 136k-token history whose ids the prefix cache no longer holds would take ~10 ms,
and the loop would serve nobody meanwhile. So such a step runs under a budget
(`on_loop`, set by `http.common.AppContext.run_cpu`), and an encode asked for more new text
than that raises `OverBudget` before it starts: the step is then run again on the pool.
Nothing is stored before the check (`segments.PrefixCache.encode`), so the first attempt
leaves no trace.
"""

from __future__ import annotations

import contextvars

ENCODE_BUDGET: contextvars.ContextVar[int | None] = contextvars.ContextVar("encode_budget", default=None)
"""Characters an encode may take anew in the current step; None: no bound (a pool thread)."""


class OverBudget(Exception):
    """An encode on the event loop would take more new text than `ENCODE_BUDGET` allows."""


def check(chars: int) -> None:
    """Raise `OverBudget` when ``chars`` new characters exceed the current step's budget."""
    budget = ENCODE_BUDGET.get()
    if budget is not None and chars > budget:
        raise OverBudget(f"{chars} characters to encode on the event loop (budget {budget})")
