"""Start-up: the `render-service` command line, its flags and the app it serves."""
