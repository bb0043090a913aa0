"""What the operator chose, as frozen values every layer above may read (`serve.ServeConfig`).

A leaf: it imports only the vocabulary (wire/) and media defaults, never the layers that read
it. The command line that fills it is serve/flags.py."""
