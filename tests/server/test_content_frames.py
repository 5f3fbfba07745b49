"""A plain content chunk's frame from the stream's template is exactly the whole encoding
(issue 40: the template saves the event loop the chunk's dicts and their JSON per token)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.turn.events import ResponseIdentity, Text
from server import sse
from server.chat import encoder
from server.chat.chunks import delta_chunk
from server.chat.content_frames import _MARK, ContentFrames
from server.chat.encoder import ChatStream

from ..decoding.randomized import examples

# Text a model may say, weighted to what JSON and SSE treat specially: quotes, backslashes,
# control characters, the line breaks only splitlines sees, non-BMP characters.
TEXT = st.text(st.one_of(st.sampled_from('"\\\n\r\t\x00\x1f\x7f\x85\u2028\u2029é€😀'),
                         st.characters(blacklist_categories=("Cs",))), max_size=30)
IDENTS = st.builds(ResponseIdentity, id=st.one_of(st.just("chatcmpl-1"), TEXT),
                   created=st.integers(0, 2**40),
                   model=st.one_of(TEXT, st.just(_MARK), st.just("a" + _MARK + "b")))


def _whole(ident: ResponseIdentity, text: str) -> bytes:
    return sse.encode_event(delta_chunk(ident, {"content": text}))


@settings(max_examples=examples(200), deadline=None)
@given(ident=IDENTS, texts=st.lists(TEXT, min_size=1, max_size=4))
def test_a_template_frame_is_the_whole_encoding(ident: ResponseIdentity, texts: list[str]) -> None:
    frames = ContentFrames(ident)
    for text in texts:
        frame = frames.frame(text)
        if frame is None:  # the marker's JSON is in the identity: no template, encoded whole
            assert _MARK in ident.id or _MARK in ident.model
            continue
        assert frame == _whole(ident, text)


def test_a_model_name_holding_the_marker_has_no_template() -> None:
    ident = ResponseIdentity(id="chatcmpl-1", created=1, model=_MARK)
    assert ContentFrames(ident).frame("x") is None
    frames = ChatStream(ident, logprobs=False, include_usage=False)
    assert frames.encode(Text("a"))[0] != _whole(ident, "a")  # the first chunk carries the role
    assert frames.encode(Text("b\u2028")) == [_whole(ident, "b\u2028")]


def test_a_stream_sends_template_frames_after_its_first_chunk(monkeypatch) -> None:
    """Plain content chunks after the first build no chunk dicts; the others still do."""
    ident = ResponseIdentity(id="chatcmpl-9", created=5, model="m")
    built: list[int] = []
    monkeypatch.setattr(encoder, "delta_chunk", lambda *a: built.append(1) or delta_chunk(*a))
    enc = ChatStream(ident, logprobs=False, include_usage=False)
    first = enc.encode(Text("{"))
    assert b'"role":"assistant"' in first[0] and len(built) == 1
    for text in ('"a"', ":", "1\u2028", "}"):
        assert enc.encode(Text(text)) == [_whole(ident, text)]
    assert len(built) == 1
    asked = ChatStream(ident, logprobs=True, include_usage=False)  # logprobs: encoded whole
    asked.encode(Text("a"))
    asked.encode(Text("b"))
    assert len(built) == 3
