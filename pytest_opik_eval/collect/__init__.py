"""Collection: the marker read, its dataset loaded and selected (or a stored run's snapshot
replayed on resume), and each eval test expanded into one test case per item and trial."""
