"""llmock in a process of its own: ``python -m bench._llmock_serve [options]``.

For measurements that must not count the server (memory) or share the GIL with it (the
``--llmock process`` option of click_ack). The benchmark starts this, reads the port from
the first line of stdout, and closes stdin to stop it. Every streamed answer is
``--words`` words, one chunk per word, ``--chunk-ms`` apart; with ``--stall`` it sends
``--stall-after`` chunks (2: the first text of a Chat Completions answer arrives) and then
stalls that many seconds.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from llmock.scenarios import Reply, StreamFault

from bench._llmock import llmock_server


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--words", type=int, default=400)
    p.add_argument("--chunk-ms", type=int, default=0)
    p.add_argument("--stall", type=float, default=0.0, help="seconds; 0 = no stall")
    p.add_argument("--stall-after", type=int, default=2, help="chunks sent before the stall")
    args = p.parse_args()
    with llmock_server() as server:
        text = " ".join(f"word{i}" for i in range(args.words))
        server.state.scenarios.add(Reply(text=text, times=None))
        if args.stall:
            server.state.scenarios.add(
                StreamFault(
                    "stall", after_chunks=args.stall_after, stall_seconds=args.stall, times=None
                )
            )
        chaos = server.state.stream_chaos
        server.state.stream_chaos = replace(chaos, chunk_delay_ms=args.chunk_ms).validated()
        print(server.port, flush=True)
        sys.stdin.read()  # until the benchmark closes our stdin (or dies)


if __name__ == "__main__":
    main()
