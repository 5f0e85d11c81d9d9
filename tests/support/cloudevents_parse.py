#!/usr/bin/env python3
"""Reads messages as we send them (one JSON object a line on stdin) and parses each with the
CNCF CloudEvents SDK for Python (pip: cloudevents), an implementation that is not ours.
Prints, a line each, the event's attributes and data as the SDK reads them, or
{"error": ...} when the SDK refuses the message.

Input: {"broker": "kafka" | "amqp", "headers": {name: text}, "key": text | null,
        "content_type": text | null (RabbitMQ's property), "body": text (UTF-8)}
"""
import json
import sys

from cloudevents.http import from_http
from cloudevents.kafka import KafkaMessage, from_binary, from_structured


def parse(message):
    headers = message["headers"]
    body = message["body"].encode("utf-8")
    if message["broker"] == "kafka":
        raw = {k: v.encode("utf-8") for k, v in headers.items()}
        kafka = KafkaMessage(headers=raw, key=(message.get("key") or "").encode("utf-8"), value=body)
        content_type = headers.get("content-type", "")
        if content_type.startswith("application/cloudevents+json"):
            return from_structured(kafka)
        return from_binary(kafka)
    # AMQP: the AMQP binding's cloudEvents_ application properties, as HTTP's ce- headers.
    http = {}
    for name, value in headers.items():
        if name.startswith("cloudEvents_"):
            http["ce-" + name[len("cloudEvents_"):]] = value
    if message.get("content_type"):
        http["content-type"] = message["content_type"]
    return from_http(http, body)


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    try:
        event = parse(json.loads(line))
        attributes = {}
        for name, value in event.get_attributes().items():
            if isinstance(value, (bytes, bytearray)):
                value = value.decode("utf-8")
            elif hasattr(value, "isoformat"):
                value = value.isoformat()
            attributes[name] = value
        data = event.get_data()
        if isinstance(data, (bytes, bytearray)):
            data = json.loads(data)
        print(json.dumps({"attributes": attributes, "data": data}))
    except Exception as error:  # the SDK's refusal is the answer
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
