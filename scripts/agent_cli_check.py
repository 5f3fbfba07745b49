"""Run Codex CLI and Claude Code, unmodified, against this server: a shell tool call round trip.

The embedded SmolLM2-135M rarely calls a tool when asked, so this serves a scripted model whose
answer depends on the prompt: before a tool result it calls the client's shell tool (Codex's
``exec_command``, Claude Code's ``Bash``) to run ``echo <TOKEN>``; once the prompt holds the
command's output it answers in words.  What is checked is the wire: the client parses the call,
runs the command, sends its output back in the next request and ends with rc 0.

    .venv/bin/python scripts/agent_cli_check.py --bin-dir /tmp/agents-clis/node_modules/.bin

Prints each client's rc and the last lines of its output; exits non-zero when one failed.
``--record DIR`` saves every request the clients send (method, path, headers, body) to
``DIR/<client>/NNN.json``, through a recording proxy in front of the server (how the fixtures
under tests/fixtures/agent_clients/ were captured).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from afm_struct.models import load_tokenizer
from afm_struct.testing import Script, scripted_loaded_model
from server.live import start_server
from server.model_alias import parse_aliases
from server.settings import ServerSettings

TOKEN = "hello-from-afm-42"


# Each client's shell tool and the arguments that run ``echo TOKEN`` (every required one).
SHELL_TOOLS = {"codex": ("exec_command", {"cmd": f"echo {TOKEN}"}),
               "claude": ("Bash", {"command": f"echo {TOKEN}"}),
               "opencode": ("bash", {"command": f"echo {TOKEN}", "description": "Print the token"})}


def call(tool: str, arguments: dict[str, str]) -> str:
    """The Hermes tool call SmolLM2's template reads (the served model's own syntax)."""
    body = json.dumps({"name": tool, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call>"


def scripted(tokenizer, tool: str, arguments: dict[str, str]) -> Script:
    def answer(prompt_ids: list[int]) -> str:
        prompt = tokenizer.decode(prompt_ids)
        # The command's output is in the prompt once the client sent the tool result back.
        if prompt.count(TOKEN) > prompt.count(f"echo {TOKEN}"):
            return f"The command printed {TOKEN}."
        return call(tool, arguments)

    return Script(answer)


def recording_proxy(upstream: str, out: Path) -> tuple[str, ThreadingHTTPServer]:
    """A proxy on an ephemeral port that saves each request to ``out`` and relays the answer."""
    out.mkdir(parents=True, exist_ok=True)
    count = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            record = {"method": self.command, "path": self.path, "headers": dict(self.headers),
                      "body": json.loads(body) if body else None}
            (out / f"{next(count):03d}.json").write_text(json.dumps(record, indent=1, ensure_ascii=False))
            skip = ("host", "content-length", "accept-encoding", "connection")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            with httpx.stream(self.command, upstream + self.path, headers=headers, content=body,
                              timeout=300) as r:
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for chunk in r.iter_raw():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        def do_HEAD(self) -> None:  # Claude Code's reachability probe
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def run(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[int, str]:
    done = subprocess.run(cmd, env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
    return done.returncode, done.stdout + done.stderr


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", required=True, help="where the codex and claude executables are")
    p.add_argument("--record", type=Path, default=None, help="save the requests under this folder")
    p.add_argument("clients", nargs="*", default=["codex", "claude"], choices=sorted(SHELL_TOOLS),
                   help="the clients to run (default: codex claude)")
    args = p.parse_args()
    tokenizer = load_tokenizer()
    work = tempfile.mkdtemp(prefix="afm-agents-")
    failed = 0
    for client in args.clients:
        tool, arguments = SHELL_TOOLS[client]
        loaded = scripted_loaded_model(tokenizer, scripted(tokenizer, tool, arguments), context_length=65536)
        live = start_server(loaded, ServerSettings(model_aliases=parse_aliases(["*=scripted"])))
        home = Path(work) / client
        home.mkdir()
        url, proxy = ((live.url, None) if args.record is None
                      else recording_proxy(live.url, args.record / client))
        try:
            if client == "codex":
                (home / "config.toml").write_text(
                    'model = "gpt-5-codex"\nmodel_provider = "afm"\n'
                    f'[model_providers.afm]\nname = "afm"\nbase_url = "{url}/v1"\n'
                    'wire_api = "responses"\n')
                cmd = [f"{args.bin_dir}/codex", "exec", "--skip-git-repo-check", "--sandbox",
                       "danger-full-access", f"Run the shell command: echo {TOKEN}"]
                env = {"CODEX_HOME": str(home), "OPENAI_API_KEY": "dummy"}
            elif client == "opencode":
                config = {"$schema": "https://opencode.ai/config.json", "model": "afm/scripted",
                          "provider": {"afm": {"npm": "@ai-sdk/openai-compatible", "name": "afm-struct",
                                               "options": {"baseURL": f"{url}/v1"},
                                               "models": {"scripted": {"name": "scripted"}}}},
                          "permission": {"bash": "allow"}}
                (Path(work) / "opencode.json").write_text(json.dumps(config))
                cmd = [f"{args.bin_dir}/opencode", "run", "-m", "afm/scripted",
                       f"Run the shell command: echo {TOKEN}"]
                env = {"HOME": str(home), "OPENAI_API_KEY": "dummy",
                       "OPENCODE_CONFIG": str(Path(work) / "opencode.json")}
            else:
                cmd = [f"{args.bin_dir}/claude", "-p", f"Run the shell command: echo {TOKEN}",
                       "--allowedTools", "Bash", "--max-turns", "3"]
                env = {"HOME": str(home), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "dummy",
                       "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
            rc, out = run(cmd, env, work)
        finally:
            if proxy is not None:
                proxy.shutdown()
            live.stop()
        ok = rc == 0 and f"The command printed {TOKEN}" in out
        failed += not ok
        print(f"== {client}: rc={rc} round trip {'ok' if ok else 'FAILED'}")
        print("\n".join(out.strip().splitlines()[-8:]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
