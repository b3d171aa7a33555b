// Stable colours: the same event name gets the same colour in every view, level
// and session, so a user can follow "aten::conv2d" across zooms and runs.

/** FNV-1a, 32 bit: fast, well spread for short strings, deterministic. */
export function hashString(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i += 1) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * Pastel colours (like chrome://tracing and Perfetto) keep dark labels readable
 * on every hue; saturation and lightness vary a little so neighbouring hues differ.
 */
export function colorForName(name) {
  const h = hashString(String(name));
  const hue = h % 360;
  const sat = 42 + ((h >>> 9) % 24);
  const light = 62 + ((h >>> 17) % 12);
  return `hsl(${hue} ${sat}% ${light}%)`;
}

/** A darker variant of a series' colour for counter lines. */
export function strokeForName(name) {
  const h = hashString(String(name));
  return `hsl(${h % 360} 55% 38%)`;
}
