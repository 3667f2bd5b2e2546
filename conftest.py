# Collects every lesson page under docs/ as a test (see lessonlib/engine/build/pytest_plugin.py).
pytest_plugins = ["lessonlib.engine.build.pytest_plugin"]
