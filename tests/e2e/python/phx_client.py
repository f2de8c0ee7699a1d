"""Joins a channel and pushes one event with phxsocket, the Python Phoenix
client from PyPI, then prints what came back as JSON. phxsocket sends
numeric refs (0, 1, 2, ...) and files its pending replies under them, so a
server that answers with string refs leaves it waiting (the caller's time
bound then fails the test): phx_client.py WS_URL TOPIC."""
import json
import sys

from phxsocket import Client

url, topic = sys.argv[1], sys.argv[2]
client = Client(url, {"user": "py"})
client.connect()
channel = client.channel(topic, {"hello": "world"})
joined = channel.join()
pushed = channel.push("ping", {"n": 1}, reply=True).wait_for_response()
print(json.dumps({"join": joined, "push": pushed}))
client.close()
