"""An OTLP/HTTP trace receiver in a process of its own: ``python -m bench._otlp_serve``.

The tests' receiver (tests/fakes/otlp_receiver.py, which decodes every request with
``opentelemetry-proto``), served apart so that decoding the spans is not counted in the
CPU of the process being measured. Prints its URL on the first line of stdout; stops
when its stdin closes, then prints how many spans it received.
"""

from __future__ import annotations

import asyncio
import sys

from tests.fakes.otlp_receiver import OtlpReceiver


async def serve() -> None:
    receiver = OtlpReceiver()
    await receiver.start()
    print(receiver.url, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await receiver.close()
    print(len(receiver.spans), flush=True)


if __name__ == "__main__":
    asyncio.run(serve())
