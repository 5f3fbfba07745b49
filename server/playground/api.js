// Requests to the server: the constraint fields, compile / validate, the streamed chat, cancel,
// and the copy-as-curl / copy-as-Python text of the exact request.

export class InputError extends Error {}

// The request fields that carry the editor's constraint (chat completions' own, or vLLM's
// guided_* fields, which this server enforces: docs/protocol.md).
export function constraintFields(kind, text) {
  if (kind === "json_schema") {
    return { response_format: { type: "json_schema", json_schema: { name: "playground", schema: parseJson(text), strict: true } } };
  }
  if (kind === "regex") return { guided_regex: text };
  if (kind === "choice") {
    const choices = text.split("\n").map((s) => s.trim()).filter((s) => s.length > 0);
    if (!choices.length) throw new InputError("write at least one choice, one per line");
    return { guided_choice: choices };
  }
  if (kind === "lark") return { guided_grammar: text };
  if (kind === "tools") {
    const tools = parseJson(text);
    if (!Array.isArray(tools)) throw new InputError("tools: a JSON array of tool definitions");
    return { tools, tool_choice: "required" };
  }
  throw new InputError(`unknown constraint kind ${kind}`);
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new InputError(`not JSON: ${err.message}`);
  }
}

export function headers(key, extra = {}) {
  const out = { "Content-Type": "application/json", ...extra };
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

// POST a JSON body; the parsed answer, or an Error carrying the server's message.
export async function postJson(base, path, body, key, signal) {
  const response = await fetch(base + path, { method: "POST", headers: headers(key), body: JSON.stringify(body), signal });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (data.error && data.error.message) || `HTTP ${response.status}`;
    const err = new Error(message);
    err.status = response.status;
    err.param = data.error && data.error.param;
    throw err;
  }
  return data;
}

export const compile = (base, body, key, signal) => postJson(base, "/v1/afm/compile", body, key, signal);
export const validate = (base, body, key) => postJson(base, "/v1/afm/validate", body, key);
export const cancel = (base, id, key) => postJson(base, `/v1/chat/completions/${encodeURIComponent(id)}/cancel`, {}, key);

export function newRequestId(pane) {
  const hex = Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `playground-${pane}-${hex}`;
}

// Stream one chat completion; onOpen(response headers) then onEvent(each decoded SSE payload).
export async function streamChat(base, body, key, requestId, { onOpen, onEvent, signal }) {
  const response = await fetch(base + "/v1/chat/completions", {
    method: "POST", signal, body: JSON.stringify(body),
    headers: headers(key, { "X-Request-ID": requestId, "X-AFM-Enforcement": "true" }),
  });
  if (!response.ok) {
    const data = await response.json().catch(() => ({}));
    throw new Error((data.error && data.error.message) || `HTTP ${response.status}`);
  }
  onOpen(response.headers);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of frame.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data !== "[DONE]") onEvent(JSON.parse(data));
      }
    }
  }
}

// The exact request as a shell command and as a Python script (the openai SDK).
export function asCurl(base, body, hasKey) {
  const auth = hasKey ? ` \\\n  -H "Authorization: Bearer $AFM_STRUCT_API_KEY"` : "";
  const json = JSON.stringify(body, null, 2).replace(/'/g, "'\\''");
  return `curl -N ${base}/v1/chat/completions \\\n  -H "Content-Type: application/json"${auth} \\\n` +
    `  -H "X-AFM-Enforcement: true" \\\n  -d '${json}'`;
}

export function asPython(base, body, hasKey) {
  const { messages, stream, stream_options: options, ...rest } = body;
  const lines = [
    "import json", "", "from openai import OpenAI", "",
    `client = OpenAI(base_url=${pyString(base + "/v1")}, api_key=${hasKey ? 'os.environ["AFM_STRUCT_API_KEY"]' : '"none"'})`,
    `stream = client.chat.completions.create(`,
    `    model=client.models.list().data[0].id,  # the SDK needs one; the server serves one model`,
    `    messages=json.loads(${pyString(JSON.stringify(messages))}),`,
    `    stream=True,`,
    `    stream_options=json.loads(${pyString(JSON.stringify(options || {}))}),`,
    `    extra_headers={"X-AFM-Enforcement": "true"},`,
    `    extra_body=json.loads(${pyString(JSON.stringify(rest))}),`,
    `)`,
    "for chunk in stream:",
    "    for choice in chunk.choices or ():  # AFM events (afm_token_fields, …) have none",
    '        print(choice.delta.content or "", end="", flush=True)',
  ];
  if (hasKey) lines.unshift("import os");
  return lines.join("\n");
}

function pyString(text) {
  return JSON.stringify(text); // a JSON string is a valid Python string literal
}
