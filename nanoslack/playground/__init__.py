"""The demo playground: a chat page on 127.0.0.1 where you watch and join an A2A room.

A demo and test tool like ``nanoslack.demo``: it drives the embedded emulator
(``nanoslack.emulator``); the product never imports it.
"""

from nanoslack.playground.notes import Note, NoteBook
from nanoslack.playground.server import PlaygroundServer
from nanoslack.playground.stage import Stage, fresh_data_dir, open_stage

__all__ = ["Note", "NoteBook", "PlaygroundServer", "Stage", "fresh_data_dir", "open_stage"]
