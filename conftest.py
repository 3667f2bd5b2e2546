# Collects every lesson page under docs/ as a test (see lessonlib/engine/builder/pytest_plugin.py).
pytest_plugins = ["lessonlib.engine.builder.pytest_plugin"]
