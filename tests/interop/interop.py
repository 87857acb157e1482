"""The Python side of the cross-runtime interop check (tests/interop/run.sh):
`interop.py write DIR EVENTS_JSON` appends the batches of the events file to a new store;
`interop.py read DIR` prints every event as one JSON line (position, type, sorted tags, data
as hex)."""

import json
import sys

from lapilli import Event, Query, Store


def main() -> None:
    command, path = sys.argv[1], sys.argv[2]
    if command == "write":
        with open(sys.argv[3], encoding="utf-8") as f:
            spec = json.load(f)
        with Store.open(path, durability="fsync", segment_size=spec["segment_size"]) as store:
            for batch in spec["batches"]:
                store.append(
                    [Event(type=e["type"], tags=e["tags"], data=bytes.fromhex(e["data_hex"])) for e in batch]
                )
    elif command == "read":
        with Store.open_read_only(path) as store:
            for event in store.read(Query.all()):
                line = {"position": event.position, "type": event.type, "tags": list(event.tags), "data_hex": event.data.hex()}
                print(json.dumps(line, ensure_ascii=False))
    else:
        raise SystemExit("usage: interop.py write DIR EVENTS_JSON | interop.py read DIR")


if __name__ == "__main__":
    main()
