// One output pane: its header (title, constraint mode, validity badge), live stats (TTFT,
// tok/s, tokens), the streamed tokens, and at the end the field table and enforcement report.

import { fieldTable, tokenSpan } from "./tokens.js";

export class Pane {
  constructor(root, title) {
    this.root = root;
    this.title = title;
    this.reset();
  }

  reset(subtitle = "") {
    this.root.replaceChildren();
    const h2 = el("h2", this.root, this.title);
    this.mode = el("span", h2, "", "mode");
    this.badge = el("span", h2, "idle", "badge");
    this.badge.dataset.state = "idle";
    this.subtitle = el("div", this.root, subtitle, "meta");
    this.stats = el("div", this.root, "", "stats");
    this.output = el("div", this.root, "", "output");
    this.errors = el("div", this.root, "", "errors");
    this.extra = el("div", this.root, "");
    this.text = "";
    this.calls = new Map(); // index -> {name, arguments}
    this.tokens = 0;
    this.started = performance.now();
    this.firstAt = null;
    this.contentChunks = 0;
    this.endedAt = null;
    this.finishReason = null;
    this.usage = null;
    this.fields = null;
    this.confidence = null;
    this.enforcement = undefined;
    this.requestId = null;
    this.updateStats();
  }

  setBadge(state, text) {
    this.badge.dataset.state = state;
    this.badge.className = `badge ${state}`;
    this.badge.textContent = text;
  }

  opened(headers) {
    this.mode.textContent = headers.get("X-AFM-Constraint-Mode") || "no constraint";
    this.mode.dataset.mode = this.mode.textContent;
    this.setBadge("streaming", "streaming…");
  }

  // One decoded SSE payload of the chat stream.
  event(data) {
    if (data.error) this.errors.textContent = data.error.message;
    if (data.usage) this.usage = data.usage;
    if ("afm_token_fields" in data) {
      this.fields = data.afm_token_fields;
      this.confidence = data.afm_field_confidence;
    }
    if ("afm_enforcement" in data) this.enforcement = data.afm_enforcement;
    for (const choice of data.choices || []) {
      if (choice.finish_reason) this.finishReason = choice.finish_reason;
      const delta = choice.delta || {};
      let shown = delta.content || "";
      for (const call of delta.tool_calls || []) {
        const entry = this.calls.get(call.index) || { name: "", arguments: "" };
        if (call.function && call.function.name) entry.name = call.function.name;
        if (call.function && call.function.arguments) entry.arguments += call.function.arguments;
        this.calls.set(call.index, entry);
        shown += (call.function && call.function.arguments) || "";
      }
      this.text += delta.content || "";
      const records = choice.afm_token_details;
      if (records && records.length) {
        for (const record of records) this.output.appendChild(tokenSpan(record));
        this.tokens += records.length;
      } else if (shown) {
        this.output.appendChild(document.createTextNode(shown));
      }
      if ((records && records.length) || shown) {
        if (this.firstAt === null) this.firstAt = performance.now();
        this.contentChunks += 1;
      }
    }
    this.updateStats();
  }

  ended() {
    this.endedAt = performance.now();
    if (this.usage) this.tokens = this.usage.completion_tokens;
    this.updateStats();
    this.extra.replaceChildren();
    if (this.fields) this.extra.appendChild(fieldTable(this.fields, this.confidence));
    if (this.enforcement !== undefined) {
      const details = el("details", this.extra, "");
      el("summary", details, `enforcement: ${this.enforcement ? this.enforcement.rung : "none"}`);
      el("pre", details, JSON.stringify(this.enforcement, null, 2));
    }
  }

  failed(message) {
    this.endedAt = performance.now();
    this.errors.textContent = message;
    this.setBadge("error", "error");
  }

  toolCalls() {
    return [...this.calls.values()];
  }

  updateStats() {
    const ttft = this.firstAt === null ? "-" : `${Math.round(this.firstAt - this.started)} ms`;
    const end = this.endedAt || performance.now();
    // A best-effort answer is held back and sent whole at the end (docs/protocol.md): its one
    // chunk says nothing of the decode speed, so the rate is taken over the whole request.
    const heldBack = this.endedAt && this.contentChunks === 1 && this.tokens > 1;
    const rate = heldBack
      ? `${(this.tokens / ((end - this.started) / 1000)).toFixed(1)} tok/s over the request (answer held back)`
      : this.firstAt !== null && end > this.firstAt && this.tokens > 1
        ? `${((this.tokens - 1) / ((end - this.firstAt) / 1000)).toFixed(1)} tok/s` : "-";
    this.stats.textContent = "";
    for (const [name, value] of [["TTFT", ttft], ["speed", rate], ["tokens", this.tokens],
      ["finish", this.finishReason || "-"]]) {
      const item = el("span", this.stats, `${name} ${value}`);
      item.dataset.stat = name;
    }
  }
}

function el(tag, parent, text, cls) {
  const node = document.createElement(tag);
  if (text) node.textContent = text;
  if (cls) node.className = cls;
  parent.appendChild(node);
  return node;
}
