"""A KServe-v2 HTTP endpoint on 127.0.0.1 that misbehaves on purpose: what a broken or hostile server answers.

It answers health, metadata and config like Triton (from the golden bundle's own inputs and outputs), and
inference according to ``mode``:

- ``ok``: the golden reference itself (a correct deployment)
- ``garbage``: a 200 whose body is not JSON
- ``dtype``: the right values as INT32
- ``shape``: a per-sample shape other than the bundle's
- ``batch``: one sample fewer than were sent
- ``hang``: the status line and headers, half the body, then silence
- ``silent``: inference requests are read and never answered (health, metadata and config are)
- ``huge``: claims a gigantic output in its JSON header
- ``restricted_infer``: inference refused as a hardened Triton refuses it without its access header
- ``evil``: an error whose text holds terminal escapes and a forged line
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from gapcheck.golden import GoldenBundle


def _triton_dtype(dtype: str) -> str:
    return {"float32": "FP32", "float16": "FP16", "float64": "FP64", "int64": "INT64", "int32": "INT32"}[dtype]


class FakeTriton:
    def __init__(self, bundle: GoldenBundle, mode: str = "ok", model: str = "m", max_batch_size: int = 4) -> None:
        self.bundle, self.mode, self.model, self.max_batch_size = bundle, mode, model, max_batch_size
        self.gate: threading.Barrier | None = None  # every inference answer waits here (other servers' requests too)
        self.inferences = 0  # inference requests received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.stop_event = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{self.model}"

    def __enter__(self) -> "FakeTriton":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()

    def metadata(self) -> dict:
        def io(infos):
            return [{"name": i.name, "datatype": _triton_dtype(i.dtype), "shape": [-1, *i.shape[1:]]} for i in infos]
        return {"name": self.model, "versions": ["1"], "platform": "onnxruntime_onnx",
                "inputs": io(self.bundle.input_infos), "outputs": io(self.bundle.output_infos)}

    def config(self) -> dict:
        def io(infos):
            return [{"name": i.name, "data_type": "TYPE_" + _triton_dtype(i.dtype), "dims": list(i.shape[1:])}
                    for i in infos]
        return {"name": self.model, "platform": "onnxruntime_onnx", "backend": "onnxruntime",
                "max_batch_size": self.max_batch_size, "input": io(self.bundle.input_infos),
                "output": io(self.bundle.output_infos)}

    def answer(self, count: int, first: int) -> list[dict]:
        outputs = []
        for info in self.bundle.output_infos:
            array = self.bundle.reference[info.name][first:first + count]
            datatype = _triton_dtype(info.dtype)
            if self.mode == "dtype":
                array, datatype = array.astype(np.int32), "INT32"
            elif self.mode == "shape":
                array = np.concatenate([array, array], axis=-1)
            elif self.mode == "batch":
                array = array[:-1] if count > 1 else array[:0]
            shape = list(array.shape)
            if self.mode == "huge":
                shape = [count, 1 << 40]
            outputs.append({"name": info.name, "datatype": datatype, "shape": shape,
                            "data": array.reshape(-1).tolist()})
        return outputs

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                base = f"/v2/models/{fake.model}"
                if self.path == "/v2":
                    self._send(200, json.dumps({"name": "triton", "version": "2.0.0", "extensions": []}).encode())
                elif fake.mode == "unready" and self.path in (f"{base}/ready", f"{base}/versions/1/ready"):
                    self._send(400, json.dumps({"error": "model is not ready"}).encode())  # in the repository, loading
                elif self.path in ("/v2/health/live", "/v2/health/ready", f"{base}/ready", f"{base}/versions/1/ready"):
                    self._send(200, b"")
                elif self.path in (base, f"{base}/versions/1"):
                    self._send(200, json.dumps(fake.metadata()).encode())
                elif self.path in (f"{base}/config", f"{base}/versions/1/config"):
                    self._send(200, json.dumps(fake.config()).encode())
                else:
                    self._send(404, json.dumps({"error": "not found"}).encode())

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                if not self.path.endswith("/infer"):  # repository index, model control: hardened away
                    self._send(403, json.dumps({"error": "This API is restricted"}).encode())
                    return
                fake.inferences += 1
                if fake.gate is not None:
                    try:
                        fake.gate.wait()
                    except threading.BrokenBarrierError:
                        self._send(500, json.dumps({"error": "gate broken: the requests did not meet"}).encode())
                        return
                if fake.mode == "restricted_infer":  # Triton's own words for a restricted API without its header
                    self._send(403, json.dumps({"error": "This API is restricted, expecting header "
                                                         "'triton-access-token'"}).encode())
                    return
                if fake.mode == "silent":  # a black hole behind a healthy front: no byte of an answer
                    fake.stop_event.wait(60)
                    return
                header_len = int(self.headers.get("Inference-Header-Content-Length", length))
                request = json.loads(body[:header_len])
                first_input = request["inputs"][0]
                count = int(first_input["shape"][0])
                # Which samples were sent: find the batch in the bundle by its first sample's bytes.
                raw = body[header_len:header_len + fake.bundle.inputs[first_input["name"]][0].nbytes]
                golden = fake.bundle.inputs[first_input["name"]]
                first = next((i for i in range(golden.shape[0]) if golden[i].tobytes() == raw), 0)
                if fake.mode == "evil":  # an error message that would repaint a terminal and forge a line
                    self._send(400, json.dumps({"error": "bad\x1b[2J\x1b[31m\nPASS all good\x07"}).encode())
                    return
                if fake.mode == "garbage":
                    self._send(200, b"\x00\xffnot json at all")
                    return
                payload = json.dumps({"model_name": fake.model, "outputs": fake.answer(count, first)}).encode()
                if fake.mode == "hang":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    fake.stop_event.wait(60)
                    return
                self._send(200, payload)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
