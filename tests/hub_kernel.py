"""A notebook run as JupyterLab runs it, through a hub's proxy: the contents and sessions REST APIs, then the
kernel's websocket (Jupyter's JSON messages on /api/kernels/ID/channels), with the learner's own token.

`NotebookSession(server_url, token, path, cells)` saves the notebook, starts its kernel in the notebook's
folder (POST /api/sessions), and `execute(code)` sends one execute_request and collects what comes back on
iopub until the kernel is idle again: stdout, stderr, results, errors, and when the request was sent.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

import requests
import websocket


@dataclass
class Execution:
    code: str
    sent_at: float  # time.time() when the execute_request left
    status: str = "timeout"  # the execute_reply's: ok, error, aborted; or timeout
    stdout: str = ""
    stderr: str = ""
    results: list[str] = field(default_factory=list)  # text/plain of execute_result and display_data
    error: str = ""

    @property
    def text(self) -> str:
        return self.stdout + self.stderr + "\n".join(self.results) + self.error


class NotebookSession:
    def __init__(self, server_url: str, token: str, path: str, cells: list[str]):
        self.server_url, self.path = server_url.rstrip("/") + "/", path
        self.http = self._http(token)
        self.save(server_url, token, path, cells)
        made = self._call("POST", "api/sessions", json={"path": path, "name": path, "type": "notebook",
                                                         "kernel": {"name": "python3"}})
        self.session_id, self.kernel_id = made["id"], made["kernel"]["id"]
        self.client_session = uuid.uuid4().hex
        ws_url = self.server_url.replace("http", "ws", 1) + f"api/kernels/{self.kernel_id}/channels"
        self.ws = websocket.create_connection(f"{ws_url}?session_id={self.client_session}", timeout=30,
                                              header=[f"Authorization: token {token}"])

    @staticmethod
    def _http(token: str) -> requests.Session:
        http = requests.Session()
        http.headers["Authorization"] = f"token {token}"
        return http

    @classmethod
    def save(cls, server_url: str, token: str, path: str, cells: list[str]) -> None:
        """Save a notebook of these code cells, as JupyterLab saves one (PUT /api/contents/PATH)."""
        notebook = {"nbformat": 4, "nbformat_minor": 5, "cells": [
            {"cell_type": "code", "id": uuid.uuid4().hex[:8], "source": cell, "metadata": {}, "outputs": [],
             "execution_count": None} for cell in cells],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                        "language": "python"}}}
        response = cls._http(token).put(server_url.rstrip("/") + f"/api/contents/{path}", timeout=120,
                                        json={"type": "notebook", "format": "json", "content": notebook})
        response.raise_for_status()

    def _call(self, method: str, path: str, **kwargs):
        response = self.http.request(method, self.server_url + path, timeout=120, **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None

    def execute(self, code: str, timeout: float = 300) -> Execution:
        msg_id = uuid.uuid4().hex
        message = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "learner",
                              "session": self.client_session, "version": "5.3", "date": ""},
                   "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                   "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                               "allow_stdin": False, "stop_on_error": True}}
        done = Execution(code, time.time())
        self.ws.send(json.dumps(message))
        deadline, replied, idle = time.monotonic() + timeout, False, False
        while not (replied and idle) and time.monotonic() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                reply = _message(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                break
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            replied |= _take(done, reply)
            idle |= reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle"
        return done

    def close(self) -> None:
        try:
            self.ws.close()
            self._call("DELETE", f"api/sessions/{self.session_id}")
        except (requests.RequestException, websocket.WebSocketException, OSError):
            pass  # the server may be gone already


def _message(frame: str | bytes) -> dict:
    """A websocket frame's message. Messages with binary buffers (the widgets' PNG curves) come as binary
    frames: a big-endian uint32 count of parts, their offsets, the JSON message first, then the buffers."""
    if isinstance(frame, str):
        return json.loads(frame)
    parts = int.from_bytes(frame[:4], "big")
    offsets = [int.from_bytes(frame[4 + 4 * i:8 + 4 * i], "big") for i in range(parts)] + [len(frame)]
    return json.loads(frame[offsets[0]:offsets[1]].decode())


def _take(done: Execution, reply: dict) -> bool:
    """Add one message's output to `done`; True for the execute_reply."""
    kind, content = reply["msg_type"], reply["content"]
    if kind == "stream":
        if content["name"] == "stdout":
            done.stdout += content["text"]
        else:
            done.stderr += content["text"]
    elif kind in ("execute_result", "display_data"):
        done.results.append(content.get("data", {}).get("text/plain", ""))
    elif kind == "error":
        done.error += f"{content['ename']}: {content['evalue']}"
    elif kind == "execute_reply":
        done.status = content["status"]
        return True
    return False
