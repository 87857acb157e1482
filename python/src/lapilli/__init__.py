"""Lapilli: an embedded event store for the Dynamic Consistency Boundary (DCB) pattern.

One directory holds one bounded context: a single global order of events, each with a type,
tags and data bytes. A decision reads the events it depends on and appends guarded by the same
query::

    from lapilli import AppendCondition, Event, Query, Store

    with Store.open("data/courses") as store:
        query = Query.for_tags("course:c1")
        result = store.read(query)
        events = result.to_list()
        store.append(
            [Event(type="CourseDefined", tags=["course:c1"], data=b'{"capacity":10}')],
            AppendCondition(fail_if_events_match=query, after=result.head),
        )

`lapilli.aio` offers the same store to asyncio code.
"""

from lapilli._lapilli import (
    AlreadyExistsError,
    AppendCondition,
    AppendResult,
    ArrowStream,
    ConflictError,
    CorruptionError,
    Event,
    InvalidArgumentError,
    LapilliError,
    LapilliIOError,
    PendingAppend,
    Query,
    QueryItem,
    ReadOnlyError,
    ReadResult,
    SequencedEvent,
    Store,
    StoreClosedError,
    StoreLockedError,
    Subscription,
    __version__,
)
from lapilli.stats import Stats

__all__ = [
    "AlreadyExistsError",
    "AppendCondition",
    "AppendResult",
    "ArrowStream",
    "ConflictError",
    "CorruptionError",
    "Event",
    "InvalidArgumentError",
    "LapilliError",
    "LapilliIOError",
    "PendingAppend",
    "Query",
    "QueryItem",
    "ReadOnlyError",
    "ReadResult",
    "SequencedEvent",
    "Store",
    "StoreClosedError",
    "StoreLockedError",
    "Stats",
    "Subscription",
    "__version__",
]
