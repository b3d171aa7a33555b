// Trace Reduce dashboard entry point (TensorBoard calls `render()` inside its iframe).
// Plain ES module, served as is by the plugin: no CDN, no bundler.
// This first version lists the runs and hosts and serves reduced traces; the
// timeline arrives with the dashboard (issue 5).

const base = new URL('.', import.meta.url);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(typeof c === 'string' ? document.createTextNode(c) : c);
  return node;
}

async function getJson(path, params) {
  const url = new URL(path, base);
  for (const [k, v] of Object.entries(params || {})) url.searchParams.set(k, v);
  const response = await fetch(url);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

export async function render() {
  document.body.replaceChildren();
  const root = el('main', {style: 'font: 14px sans-serif; padding: 16px'});
  document.body.append(root);
  let runs;
  try {
    runs = await getJson('runs');
  } catch (err) {
    root.append(el('p', {}, `Could not list traces: ${err.message}`));
    return;
  }
  if (!runs.length) {
    root.append(el('p', {}, 'No profiler traces found in this logdir.'));
    return;
  }
  const list = el('ul');
  for (const {run, hosts} of runs) {
    for (const h of hosts) {
      const params = new URLSearchParams({run, host: h.host, level: 'auto'});
      list.append(el('li', {},
          `${run} / ${h.host} (${h.format}, ${(h.bytes / 1e6).toFixed(1)} MB) `,
          el('a', {href: new URL(`trace?${params}&download=1`, base).href}, 'download reduced')));
    }
  }
  root.append(el('h2', {}, 'Trace Reduce'), list);
}
