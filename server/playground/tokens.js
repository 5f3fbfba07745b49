// The per-token view: each token coloured by its probability, forced tokens underlined, a
// hover card with its alternatives, the constraint pressure and its field; and the field table.

const tooltip = () => document.getElementById("tooltip");

export function tokenSpan(record) {
  const span = document.createElement("span");
  span.className = "tok";
  span.textContent = record.token;
  const p = Math.exp(record.logprob);
  span.style.background = `hsla(${Math.round(120 * p)}, 75%, 70%, 0.45)`;
  if (record.forced) span.classList.add("forced");
  if (record.pressure !== null && record.pressure > 0.5) span.classList.add("pressed");
  span.dataset.logprob = String(record.logprob);
  span.dataset.pressure = record.pressure === null ? "" : String(record.pressure);
  span.dataset.field = record.field;
  span.dataset.forced = String(record.forced);
  span.addEventListener("mouseenter", (e) => showCard(e, record));
  span.addEventListener("mousemove", moveCard);
  span.addEventListener("mouseleave", () => { tooltip().hidden = true; });
  return span;
}

export function cardText(record) {
  const lines = [
    `${JSON.stringify(record.token)}  p=${pct(Math.exp(record.logprob))}  logprob=${record.logprob.toFixed(3)}`,
    `field ${record.field}`,
    record.forced ? "forced by the grammar (not sampled)" :
      `constraint pressure ${record.pressure === null ? "-" : pct(record.pressure)} (mass the mask removed)`,
  ];
  if (record.top.length) {
    lines.push("alternatives:");
    for (const alt of record.top) lines.push(`  ${pct(Math.exp(alt.logprob)).padStart(7)}  ${JSON.stringify(alt.token)}`);
  }
  return lines.join("\n");
}

function showCard(event, record) {
  const card = tooltip();
  card.textContent = cardText(record);
  card.hidden = false;
  moveCard(event);
}

function moveCard(event) {
  const card = tooltip();
  card.style.left = `${Math.min(event.clientX + 12, window.innerWidth - card.offsetWidth - 8)}px`;
  card.style.top = `${event.clientY + 16}px`;
}

export function pct(x) {
  return `${(100 * x).toFixed(x < 0.001 && x > 0 ? 3 : 1)}%`;
}

// The per-field table: token counts, forced, summed and mean pressure, and extract()'s confidence.
export function fieldTable(fields, confidence) {
  const table = document.createElement("table");
  table.className = "fields";
  const head = table.createTHead().insertRow();
  for (const title of ["field", "tokens", "forced", "pressure Σ", "pressure mean", "confidence (min p)"]) {
    const th = document.createElement("th");
    th.textContent = title;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const [path, sums] of Object.entries(fields || {})) {
    const row = body.insertRow();
    row.dataset.field = path;
    const conf = confidence && confidence[path];
    const cells = [path, sums.tokens, sums.forced, sums.pressure.toFixed(3), pct(sums.mean_pressure),
      conf ? pct(conf.probability) : "-"];
    cells.forEach((value, i) => {
      const td = row.insertCell();
      td.textContent = String(value);
      if (i > 0) td.className = "num";
    });
  }
  return table;
}
