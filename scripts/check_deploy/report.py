"""Findings of the deploy checker: each names the file, the place (line and
path inside the document) and the broken name, so a user can go straight to it."""


class Report:
    def __init__(self):
        self.errors = []
        self.notes = []

    def error(self, path, line, place, message):
        loc = f"{path}:{line}" if line else str(path)
        self.errors.append(f"{loc}: {place}: {message}" if place else f"{loc}: {message}")

    def note(self, message):
        self.notes.append(message)
