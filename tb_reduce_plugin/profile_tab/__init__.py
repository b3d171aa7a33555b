"""The Profile tab (XProf's Trace Viewer), answered by tb-reduce when XProf is installed.

- `asks`: a Trace Viewer request in tb-reduce's terms, or why it stays XProf's;
- `answers`: views, event details and searches from tb-reduce's index and caches;
- `xprof_json`: the JSON form XProf's viewer reads;
- `hook`: how XProf's plugin instance gets fronted, whatever the load order.
"""
