"""A turn's ``send_file``, sent (docs/agents.md): Slack's external upload, exactly once.

Slack's three steps (``files.upload`` is retired): ``files.getUploadURLExternal``
(``filename``, ``length`` in bytes) answers an upload URL and the file's id; the bytes are
POSTed to that URL (no token: the URL is the credential); ``files.completeUploadExternal``
(``files=[{id, title}]``, ``channel_id``, ``thread_ts``, ``initial_comment``) shares the
file in the thread. A file uploaded and never completed is shared nowhere.

The file's id is recorded (``outbox_files.file_id``) once its bytes are up and before it is
completed. The poster marks the row ``sending`` before the first step, so a run that dies
anywhere leaves the row in doubt, and the next drain sends it again: without a recorded
id it uploads afresh (the earlier bytes, never completed, are shared nowhere); with one it
completes that file, unless ``files.info`` says it is already shared in the conversation
(the run died after the completion, before the row was marked sent).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.slack_response import SlackResponse

from nanoslack import failpoints
from nanoslack.logs import get_logger
from nanoslack.store import OutboxRow, Store

log = get_logger(__name__)

# The file lists of ``files.info`` that name conversations it is shared in.
_SHARED_IN = ("channels", "groups", "ims")


class Uploads:
    def __init__(self, instance: str, client: AsyncWebClient, store: Store) -> None:
        self.instance = instance
        self._client = client
        self._store = store

    async def send(self, row: OutboxRow, channel: str, thread_ts: str | None) -> str:
        """Upload and share the row's file in ``channel`` (in ``thread_ts``); its file id.
        A SlackApiError when Slack refused a step (the poster retries or gives up as for a
        post); any other exception leaves the row in doubt."""
        spec = self._store.outbox.file_of(row.id)
        if spec is None:
            raise _refused("file_not_queued", 400)  # the row lost its file: nothing to send
        file_id = spec.file_id
        if file_id is None:
            file_id = await self._upload(spec.filename, spec.content.encode("utf-8"))
            self._store.outbox.file_uploaded(row.id, file_id)
            failpoints.hit("outbox.uploaded")
        elif await self._shared_in(file_id, channel):
            log.info("file recovered: already shared", instance=self.instance, key=row.dedupe_key, id=file_id)
            return file_id
        else:
            log.info("file recovered: completing it", instance=self.instance, key=row.dedupe_key, id=file_id)
        try:
            await self._client.files_completeUploadExternal(
                files=[{"id": file_id, "title": spec.title}],
                channel_id=channel,
                thread_ts=thread_ts or None,
                initial_comment=row.text or None,
            )
        except SlackApiError as exc:
            # A re-run whose files.info could not answer: the run before the crash completed
            # it (always into this channel), so it is shared, not failed.
            if spec.file_id is None or exc.response.get("error") != "file_already_completed":
                raise
            log.info(
                "file recovered: already completed", instance=self.instance, key=row.dedupe_key, id=file_id
            )
        return file_id

    async def _upload(self, filename: str, data: bytes) -> str:
        """Steps one and two: the file's id, its bytes at Slack."""
        resp = await self._client.files_getUploadURLExternal(filename=filename, length=len(data))
        url, file_id = str(resp.get("upload_url") or ""), str(resp.get("file_id") or "")
        if not url or not file_id:
            raise _refused("no_upload_url", 400)
        timeout = aiohttp.ClientTimeout(total=self._client.timeout)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, data=data, proxy=self._client.proxy, ssl=_ssl(self._client)) as answer,
        ):
            status = answer.status
        if status >= 500:
            # No proof the bytes are not there; the row stays in doubt and the next drain
            # uploads afresh (a file never completed is shared nowhere).
            raise ConnectionError(f"upload answered {status}")
        if status != 200:
            raise _refused(f"upload_failed_{status}", status)
        return file_id

    async def _shared_in(self, file_id: str, channel: str) -> bool:
        """Whether Slack says the file is shared in ``channel`` already. Unknown (no
        ``files:read``, a failed call) counts as not: completing it then is the try."""
        try:
            resp = await self._client.files_info(file=file_id)
        except SlackApiError as exc:
            error = exc.response.get("error")
            log.info("file info unavailable", instance=self.instance, file=file_id, error=error)
            return False
        info: dict[str, Any] = resp.get("file") or {}
        shares: dict[str, Any] = info.get("shares") or {}
        named = {c for key in _SHARED_IN for c in info.get(key) or []}
        named |= {c for kind in shares.values() if isinstance(kind, dict) for c in kind}
        return channel in named


def _ssl(client: AsyncWebClient) -> Any:
    """The client's SSL context, or aiohttp's default checks when it has none."""
    return client.ssl if client.ssl is not None else True


def _refused(error: str, status: int) -> SlackApiError:
    """A refusal in the shape of Slack's: the poster counts it as a failed try."""
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="files.upload",
        req_args={},
        data={"ok": False, "error": error},
        headers={},
        status_code=status,
    )
    return SlackApiError(f"the upload was refused: {error}", response)  # type: ignore[no-untyped-call]  # slack-sdk leaves it untyped
