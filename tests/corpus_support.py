"""The corpus traces the sweeps run over (tests/reduce/test_corpus_sweep.py,
tests/query/test_query_corpus_sweep.py): every Chrome-JSON and XSpace trace under
../shared/corpus/public/*/ and generated/*/, less the two real files that must be refused."""

from __future__ import annotations

from conftest import ROOT

CORPUS = ROOT.parent / "shared" / "corpus"
# rocprofiler-sdk's own JSON: a real file that is not a trace, so it must be refused.
NOT_A_TRACE = "public/TraceLens/tests__rocprof__908_results.json.gz"
# A real XSpace mangled by a text round-trip: must be refused.
CORRUPT_XSPACE = "public/xprof/xprof__convert__test_xplanes__tpu_inference_2@bfd424c8-CORRUPT.xplane.pb"


def _traces() -> list[str]:
    """Chrome-JSON and XSpace traces under public/*/ and generated/*/, relative to the corpus."""
    if not CORPUS.is_dir():
        return []
    found = []
    for part in ("public", "generated"):
        for path in sorted((CORPUS / part).glob("*/*")):
            rel = path.relative_to(CORPUS).as_posix()
            if path.name.endswith((".json", ".json.gz", ".xplane.pb")) and rel not in (NOT_A_TRACE, CORRUPT_XSPACE):
                found.append(rel)
    return found


TRACES = _traces()
