"""A controllable TCP proxy (asyncio, standard library only): one process serves any number of
named proxies, each listening on its own port and forwarding to a backend port on 127.0.0.1.

The harness drives it over a control port, one JSON object per line in, one per line out:

    {"cmd": "add", "name": "n1-m1", "listen": 5451, "backend": 5441}
    {"cmd": "blackhole", "name": "n1-m1"}   # stop forwarding both ways; sockets stay open;
                                            # new connections are accepted and get nothing
    {"cmd": "forward", "name": "n1-m1"}     # forward again: held data and held connections flow
    {"cmd": "reset", "name": "n1-m1"}       # close every connection with a TCP RST
    {"cmd": "point", "name": "n1-m1", "backend": 5442}   # new connections go there
    {"cmd": "status"}

A black hole pauses reading rather than dropping bytes, as a network partition does (TCP keeps
the data and retransmits it when the path comes back), so a stream that survives a black hole is
intact. Connections accepted while black-holed connect to the backend only when forwarding
resumes, like a SYN answered late.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import sys
from typing import Dict, List, Optional, Set


def _rst(writer: asyncio.StreamWriter) -> None:
    """Closes with SO_LINGER 0, so that the peer gets a reset rather than an orderly FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class Link:
    """One accepted client connection and, once forwarding, its backend connection."""

    def __init__(self, proxy: "Proxy", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.creader, self.cwriter = reader, writer
        self.bwriter: Optional[asyncio.StreamWriter] = None
        self.tasks: List[asyncio.Task] = []
        self.closed = False

    async def run(self) -> None:
        try:
            await self.proxy.flowing.wait()
            if self.closed:
                return
            try:
                breader, self.bwriter = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", self.proxy.backend), 10
                )
            except (OSError, asyncio.TimeoutError):
                self.close(reset=True)
                return
            if self.closed:
                self.close(reset=True)
                return
            self.tasks = [
                asyncio.ensure_future(self.pipe(self.creader, self.bwriter)),
                asyncio.ensure_future(self.pipe(breader, self.cwriter)),
            ]
            await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.close(reset=False)

    async def pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self.proxy.flowing.wait()
                data = await reader.read(65536)
                if not data:
                    return
                # Bytes read just before a black hole began are held until it ends.
                await self.proxy.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, ConnectionError, asyncio.CancelledError):
            return

    def close(self, reset: bool) -> None:
        if self.closed:
            return
        self.closed = True
        for task in self.tasks:
            task.cancel()
        for w in (self.cwriter, self.bwriter):
            if w is None:
                continue
            if reset:
                _rst(w)
            else:
                try:
                    w.close()
                except Exception:
                    pass
        self.proxy.links.discard(self)


class Proxy:
    def __init__(self, name: str, listen: int, backend: int) -> None:
        self.name, self.listen, self.backend = name, listen, backend
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.links: Set[Link] = set()
        self.server: Optional[asyncio.AbstractServer] = None
        self.accepted = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", self.listen, reuse_address=True)

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = Link(self, reader, writer)
        self.links.add(link)
        await link.run()

    def reset(self) -> int:
        links = list(self.links)
        for link in links:
            link.close(reset=True)
        return len(links)

    def state(self) -> dict:
        return {
            "listen": self.listen,
            "backend": self.backend,
            "mode": "forward" if self.flowing.is_set() else "blackhole",
            "links": len(self.links),
            "accepted": self.accepted,
        }


class Control:
    def __init__(self) -> None:
        self.proxies: Dict[str, Proxy] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                try:
                    reply = await self.command(json.loads(line))
                except Exception as e:  # a bad command is answered, never fatal
                    reply = {"ok": False, "error": repr(e)}
                writer.write((json.dumps(reply) + "\n").encode())
                await writer.drain()
        finally:
            writer.close()

    async def command(self, c: dict) -> dict:
        cmd = c["cmd"]
        if cmd == "status":
            return {"ok": True, "proxies": {n: p.state() for n, p in self.proxies.items()}}
        if cmd == "add":
            if c["name"] in self.proxies:
                p = self.proxies[c["name"]]
                p.backend = c["backend"]
                return {"ok": True, "existing": True}
            p = Proxy(c["name"], c["listen"], c["backend"])
            await p.start()
            self.proxies[c["name"]] = p
            return {"ok": True}
        p = self.proxies[c["name"]]
        if cmd == "blackhole":
            p.flowing.clear()
        elif cmd == "forward":
            p.flowing.set()
        elif cmd == "reset":
            return {"ok": True, "reset": p.reset()}
        elif cmd == "point":
            p.backend = c["backend"]
        else:
            return {"ok": False, "error": f"unknown command {cmd}"}
        return {"ok": True}


async def main(port: int) -> None:
    control = Control()
    server = await asyncio.start_server(control.handle, "127.0.0.1", port, reuse_address=True)
    print(f"proxy control listening on {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--control", type=int, required=True)
    args = ap.parse_args()
    try:
        asyncio.run(main(args.control))
    except KeyboardInterrupt:
        sys.exit(0)
