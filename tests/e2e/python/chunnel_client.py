"""Joins a channel and pushes one event with chunnel, another Python Phoenix
client from PyPI (asyncio), then prints what came back as JSON on its last
line (chunnel prints the URL it connects to first). chunnel sends numeric
refs and its receive loop dies on a reply whose ref it does not know as
sent (KeyError: '1' when a server answers with string refs):
chunnel_client.py WS_URL TOPIC."""
import asyncio
import json
import sys

from chunnel.socket import Socket


async def main(url, topic):
    async with Socket(url, {"user": "py"}) as socket:
        channel = socket.channel(topic, {"hello": "world"})
        joined = await channel.join()
        pushed = await (await channel.push("ping", {"n": 1})).response()
        print(json.dumps({"join": joined, "push": pushed}))


asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2]), 15))
