"""What a process running the core sets up once: logging, isolation from the processes it
starts, and where settings come from (shared by the terminal runner and the Slack app).
"""
