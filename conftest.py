# Collects every lesson page under docs/ as a test (see lessonlib/engine/pytest_plugin.py).
pytest_plugins = ["lessonlib.engine.pytest_plugin"]
