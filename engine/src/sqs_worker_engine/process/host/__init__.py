"""What the process asks of its interpreter and its OS: the garbage collector's pace, the event loop, the stop signals."""
