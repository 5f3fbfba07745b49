// The playground: the editor with its live compile verdict, Run (constrained and free, side by
// side), cancel by request ID, validity badges from the server's validator, copy the request.

import { asCurl, asPython, cancel, compile, constraintFields, InputError, newRequestId, streamChat, validate } from "./api.js";
import { constraintText, GALLERY } from "./gallery.js";
import { Pane } from "./panes.js";

const $ = (id) => document.getElementById(id);
const base = window.location.origin;
const panes = {
  constrained: new Pane($("pane-constrained"), "Constrained"),
  free: new Pane($("pane-free"), "Free"),
};
let compileAbort = null;
let compileTimer = null;
let running = null; // {controller, ids: {pane: requestId}, urls: {pane: base}}

function key() {
  return $("api-key").value.trim();
}

function compareUrl() {
  return $("compare-url").value.trim().replace(/\/+$/, "");
}

function loadExample(id) {
  const example = GALLERY.find((e) => e.id === id) || GALLERY[0];
  $("kind").value = example.kind;
  $("constraint").value = constraintText(example);
  $("prompt").value = example.prompt;
  scheduleCompile(0);
}

function showVerdict(state, text, data) {
  const verdict = $("verdict");
  verdict.className = `verdict ${state}`;
  verdict.dataset.state = state;
  verdict.textContent = text;
  if (data && data.enforcement && data.enforcement.counts) {
    const counts = Object.entries(data.enforcement.counts).map(([s, n]) => `${n} ${s}`).join(", ");
    verdict.appendChild(document.createElement("br"));
    verdict.appendChild(document.createTextNode(`keywords: ${counts}`));
  }
}

function scheduleCompile(delay = 300) {
  clearTimeout(compileTimer);
  compileTimer = setTimeout(runCompile, delay);
}

async function runCompile() {
  if (compileAbort) compileAbort.abort();
  const controller = compileAbort = new AbortController();
  let fields;
  try {
    fields = constraintFields($("kind").value, $("constraint").value);
  } catch (err) {
    if (!(err instanceof InputError)) throw err;
    showVerdict("error", `✗ ${err.message}`);
    return;
  }
  showVerdict("compiling", "compiling…");
  try {
    const data = await compile(base, fields, key(), controller.signal);
    if (!data.ok) {
      const err = data.error;
      showVerdict("error", `✗ ${err.message}${err.param ? ` (${err.param})` : ""}`);
      return;
    }
    const parts = [`✓ ${data.mode || "free"}`];
    if (data.backend) parts.push(data.backend);
    parts.push(`${data.compile_ms} ms${data.cached ? " (cached)" : ""}`);
    if (data.reason) parts.push(`reason: ${data.reason}`);
    if (data.rewrites && data.rewrites.length) parts.push(`rewrites: ${data.rewrites.join(", ")}`);
    if (data.downgraded) parts.push("downgraded (best-effort)");
    showVerdict(data.mode || "free", parts.join(" · "), data);
  } catch (err) {
    if (err.name === "AbortError") return;
    showVerdict("error", `✗ ${err.message}${err.param ? ` (${err.param})` : ""}`);
  }
}

// The two requests of a run: the same prompt and sampling, the constraint on one only.
function requestBodies() {
  const common = {
    messages: [{ role: "user", content: $("prompt").value }],
    stream: true,
    stream_options: { include_usage: true, include_token_details: true },
    max_tokens: Number($("max-tokens").value) || 256,
    temperature: Number($("temperature").value),
  };
  return { constrained: { ...common, ...constraintFields($("kind").value, $("constraint").value) }, free: common };
}

async function runPane(name, url, body, controller) {
  const pane = panes[name];
  const id = running.ids[name];
  pane.reset(url === base ? `request ${id}` : `${url} · request ${id}`);
  pane.requestId = id;
  try {
    await streamChat(url, body, key(), id, {
      onOpen: (h) => pane.opened(h), onEvent: (e) => pane.event(e), signal: controller.signal,
    });
    pane.ended();
    if (pane.finishReason === "cancelled") {
      pane.setBadge("cancelled", "cancelled");
      return;
    }
    if (pane.finishReason === "error") {
      pane.setBadge("error", "error");
      return;
    }
    await judge(pane);
  } catch (err) {
    if (err.name === "AbortError") {
      pane.ended();
      pane.setBadge("cancelled", "cancelled");
    } else {
      pane.failed(err.message);
    }
  }
}

// Validity by the server's own validator, against the constraint as written in the editor.
async function judge(pane) {
  const fields = constraintFields($("kind").value, $("constraint").value);
  const calls = pane.toolCalls();
  const body = { ...fields, output: pane.text, ...(calls.length ? { tool_calls: calls } : {}) };
  const verdict = await validate(base, body, key());
  if (verdict.valid) {
    pane.setBadge("valid", verdict.kind ? "✓ valid" : "✓ (nothing to check)");
  } else {
    pane.setBadge("invalid", verdict.parsed ? "✗ invalid" : "✗ does not parse");
    pane.errors.textContent = verdict.errors.join("\n");
  }
}

// The two request bodies, or null after showing why the input cannot make them.
function bodiesOrSayWhy() {
  try {
    return requestBodies();
  } catch (err) {
    if (!(err instanceof InputError)) throw err;
    showVerdict("error", `✗ ${err.message}`);
    return null;
  }
}

async function run() {
  const bodies = bodiesOrSayWhy();
  if (!bodies) return;
  const controller = new AbortController();
  const other = compareUrl();
  running = {
    controller,
    ids: { constrained: newRequestId("constrained"), free: newRequestId("free") },
    urls: { constrained: base, free: other || base },
  };
  panes.free.title = other ? `Compared: ${other}` : "Free";
  $("run").disabled = true;
  $("cancel").disabled = false;
  const current = running;
  await Promise.all(["constrained", "free"].map((name) => runPane(name, current.urls[name], bodies[name], controller)));
  if (running === current) running = null;
  $("run").disabled = false;
  $("cancel").disabled = true;
}

// Cancel by request ID (the server ends the generation and says so in the stream); a server
// that does not know the ID (another engine) is cut off by closing the connection.
async function cancelRun() {
  if (!running) return;
  const current = running;
  $("cancel").disabled = true;
  await Promise.all(Object.entries(current.ids).map(async ([name, id]) => {
    try {
      await cancel(current.urls[name], id, key());
    } catch (err) {
      current.controller.abort();
    }
  }));
}

function copy(kind) {
  const bodies = bodiesOrSayWhy();
  if (!bodies) return;
  const text = kind === "curl" ? asCurl(base, bodies.constrained, Boolean(key()))
    : asPython(base, bodies.constrained, Boolean(key()));
  const box = $("copied");
  box.hidden = false;
  box.dataset.kind = kind;
  box.textContent = text;
  if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).catch(() => {});
}

function init() {
  const gallery = $("gallery");
  for (const example of GALLERY) {
    const option = document.createElement("option");
    option.value = example.id;
    option.textContent = example.title;
    gallery.appendChild(option);
  }
  gallery.addEventListener("change", () => loadExample(gallery.value));
  $("kind").addEventListener("change", () => scheduleCompile(0));
  $("constraint").addEventListener("input", () => scheduleCompile());
  $("api-key").addEventListener("change", () => scheduleCompile(0));
  $("run").addEventListener("click", run);
  $("cancel").addEventListener("click", cancelRun);
  $("copy-curl").addEventListener("click", () => copy("curl"));
  $("copy-python").addEventListener("click", () => copy("python"));
  loadExample(GALLERY[0].id);
}

init();
