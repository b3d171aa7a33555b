// Fetches, parses and models a reduced trace off the main thread, so a big
// response never freezes the page (pan/zoom keep working on the old data), and
// the parsed JSON's garbage lives and dies in this worker's heap. The model's
// typed arrays are transferred to the page, not copied.
import {describeFailure, fetchText} from './api.js';
import {buildModel, transferables} from './model.js';

const controllers = new Map();

self.addEventListener('message', async (event) => {
  const msg = event.data;
  if (msg.type === 'abort') {
    const controller = controllers.get(msg.id);
    if (controller) controller.abort();
    return;
  }
  const controller = new AbortController();
  controllers.set(msg.id, controller);
  const post = (data, transfer) => self.postMessage({id: msg.id, ...data}, transfer || []);
  try {
    const t0 = performance.now();
    const text = await fetchText(msg.url, {
      signal: controller.signal,
      onProgress: (received) => post({type: 'progress', received}),
    });
    const t1 = performance.now();
    post({type: 'parsing', received: text.length});
    const model = buildModel(JSON.parse(text));
    model.timing = {receive_ms: t1 - t0, parse_ms: performance.now() - t1};
    post({type: 'done', model}, transferables(model));
  } catch (err) {
    post({type: 'error', ...describeFailure(err)});
  } finally {
    controllers.delete(msg.id);
  }
});
