"""The LiveKit fake lives in ``ringflow/simulation/livekit_fake.py`` (``ringflow call simulate`` plays phone
calls against it too); tests import it from here as before."""

from ringflow.simulation.livekit_fake import JSON, PROTOBUF, FakeLiveKit, FakeRoom, LoggedRequest, TwirpError

__all__ = ["JSON", "PROTOBUF", "FakeLiveKit", "FakeRoom", "LoggedRequest", "TwirpError"]
