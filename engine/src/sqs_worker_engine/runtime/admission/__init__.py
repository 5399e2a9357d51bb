"""Admission: what each poller may ask for and when each message may start, from one state (the ticket book, the start gate's rules, the start line, the wake-ups)."""
