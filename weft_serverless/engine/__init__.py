"""The engine: facade, driver, commits, timers and maintenance."""
