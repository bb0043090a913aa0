"""The request APIs (doors) over the shared chat plan."""
