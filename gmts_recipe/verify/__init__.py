"""What check.py holds a file or a sweep to, one refusal set each."""
