"""Files in the emulator: what was uploaded or shared, and how Slack describes and serves it.

- An app uploads the way Slack's external upload works: ``files.getUploadURLExternal``
  (``filename``, ``length``) hands out an upload URL and a file id; the bytes are POSTed to
  the URL (raw or multipart, no token); ``files.completeUploadExternal`` shares the file. A
  file uploaded but never completed is shared nowhere.
- A person shares a file through the driver (``share_file``).
- ``url_private``/``url_private_download`` are served by the emulator itself
  (``/files-pri/<team>-<file id>/[download/]<name>``) to the bot token of this workspace in
  an ``Authorization: Bearer`` header only; a file can be made to answer 403, 404 or a
  redirect to another host (``set_file_fault``).

Pure state plus the file object's shape; the engine posts, the Web API checks arguments.
"""

from __future__ import annotations

import mimetypes
import secrets
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

JSON = dict[str, Any]

READ_SCOPE = "files:read"
WRITE_SCOPE = "files:write"
# What a file can be made to do when it is downloaded (``set_file_fault``).
FAULTS = ("refused", "gone", "redirect")
# Slack's ``filetype`` for the extensions whose name differs from the extension.
_FILETYPES = {"txt": "text", "jpeg": "jpg", "md": "markdown", "yml": "yaml", "py": "python"}
_PRETTY = {"text": "Plain Text", "csv": "CSV", "png": "PNG", "jpg": "JPEG", "pdf": "PDF", "binary": "Binary"}


@dataclass
class StoredFile:
    id: str
    name: str
    title: str
    mimetype: str
    filetype: str
    user: str  # who uploaded or shared it
    created: int
    content: bytes | None = None  # None until the bytes are uploaded
    length: int = 0  # what getUploadURLExternal was told
    completed: bool = False
    channels: list[str] = field(default_factory=list)
    check_file_info: bool = False  # messages carry only its id and ``file_access``
    deleted: bool = False
    fault: str | None = None  # one of FAULTS
    location: str | None = None  # where a "redirect" file sends the download

    @property
    def size(self) -> int:
        return len(self.content) if self.content is not None else self.length


@dataclass
class FileStore:
    files: dict[str, StoredFile] = field(default_factory=dict)
    uploads: dict[str, str] = field(default_factory=dict)  # upload URL token -> file id

    def new(
        self, file_id: str, name: str, user: str, *, length: int = 0, mimetype: str | None = None
    ) -> StoredFile:
        filetype = filetype_of(name)
        f = StoredFile(
            id=file_id,
            name=name,
            title=name,
            mimetype=mimetype or mimetypes.guess_type(name)[0] or "application/octet-stream",
            filetype=filetype,
            user=user,
            created=int(time.time()),
            length=length,
        )
        self.files[file_id] = f
        return f

    def upload_token(self, file_id: str) -> str:
        token = secrets.token_urlsafe(18)
        self.uploads[token] = file_id
        return token


def filetype_of(name: str) -> str:
    ext = PurePosixPath(name).suffix.lower().lstrip(".")
    return _FILETYPES.get(ext, ext or "binary")


def file_urls(base_url: str, team_id: str, f: StoredFile) -> tuple[str, str]:
    """``url_private`` and ``url_private_download``, served by the emulator."""
    root = f"{base_url}/files-pri/{team_id}-{f.id}"
    return f"{root}/{f.name}", f"{root}/download/{f.name}"


def file_obj(base_url: str, team_id: str, domain: str, f: StoredFile, *, public: bool) -> JSON:
    """The file object as ``files.info``, ``files.completeUploadExternal`` and a message's
    ``files[]`` carry it."""
    private, download = file_urls(base_url, team_id, f)
    return {
        "id": f.id,
        "created": f.created,
        "timestamp": f.created,
        "name": f.name,
        "title": f.title,
        "mimetype": f.mimetype,
        "filetype": f.filetype,
        "pretty_type": _PRETTY.get(f.filetype, f.filetype.upper()),
        "user": f.user,
        "user_team": team_id,
        "editable": False,
        "size": f.size,
        "mode": "hosted",
        "is_external": False,
        "external_type": "",
        "is_public": public,
        "public_url_shared": False,
        "display_as_bot": False,
        "username": "",
        "url_private": private,
        "url_private_download": download,
        "permalink": f"https://{domain}.slack.com/files/{f.user}/{f.id}/{f.name}",
        "channels": list(f.channels) if public else [],
        "groups": [],
        "ims": [] if public else list(f.channels),
        "has_rich_preview": False,
        "file_access": "visible",
    }


def message_file(obj: JSON, check_file_info: bool) -> JSON:
    """A file as a message's ``files[]`` carries it: whole, or (Slack Connect and some
    shared files) only its id with ``file_access: check_file_info``."""
    if check_file_info:
        return {
            "id": obj["id"],
            "file_access": "check_file_info",
            "created": obj["created"],
            "user": obj["user"],
        }
    return obj
