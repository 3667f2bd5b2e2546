"""The lessons' experiments: gradient reach, the memory task and what a step costs."""
