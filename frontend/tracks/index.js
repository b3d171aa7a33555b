// The registry of track kinds the timeline draws. Adding a kind: one module in
// this folder, made with `defineTrack` (common.js), imported and listed below.
//
// A track kind is one object; what it keeps per timeline (colour tables, caches,
// its data) lives in `tl.stateOf(kind)`, made by its `init(tl)`. Every part is
// optional (defineTrack fills in "nothing here"):
//
//   kind                  the `kind` of the hits it yields ('slice', 'counter', …)
//   row                   the kind of layout row it owns ('track', 'counter', 'waveform'),
//                         or null: it only draws over other rows (instants) or over all (flows)
//   init(tl)              → its per-timeline state
//   prepare(tl, m)        a new model is shown (colour tables, caches)
//   setData(tl, data)     its own data, given by `tl.setTrackData(kind, data)` (the waveform's)
//   rows(tl, m, proc)     → indices of its rows: proc -1 is above the processes, else in process `proc`
//   height(tl, m, index)  → px, its row `index`
//   label(tl, m, index)   → the gutter's text for its row `index`
//   note(tl, m, index)    → a second, muted line under it (rows at least two lines tall), or ''
//   draw(tl, f, item, y)  called for every row on screen (any kind's), in this list's order:
//                         draw what is yours in `item` ({kind, index, y, h}), whose top is canvas `y`
//   drawOver(tl, f)       after all rows (global instants, flows)
//   hitTest(tl, f, item, p)  → a hit or null; p = {x, y, cy, t, tol}: canvas px, content y,
//                         model-relative µs, a few px in µs. Asked in reverse order (what is
//                         drawn last is picked first); the first hit wins
//   highlight(tl, f, hit, color, lineWidth)  outline its hovered or selected hit
//   describe(m, hit, origin)  → tooltip lines [[cssClass, text], …]; times from `origin` (abs µs)
//   details(m, hit, origin)   → {name, rows: [[key, text], …], k, summary, span} for a details panel
//   locate(tl, query)     test hook: where something is drawn, {x, y} on the canvas
//
// `f`, the frame: {m, ctx, X0, scale, vs, ve, view0, right} — the model, the context, the plot's
// left edge (px), px per µs, the view's start and end relative to m.origin, its absolute start
// and the plot's right edge (px).
import {counterTrack} from './counters.js';
import {flowTrack} from './flows.js';
import {instantTrack} from './instants.js';
import {sliceTrack} from './slices.js';
import {waveformTrack} from './waveform.js';

/** In drawing order: rows top to bottom within a process, then marks over them. */
export const TRACK_KINDS = [waveformTrack, counterTrack, sliceTrack, instantTrack, flowTrack];

/** Kinds by the `kind` of their hits. */
export const KIND_OF_HIT = new Map(TRACK_KINDS.map((k) => [k.kind, k]));
