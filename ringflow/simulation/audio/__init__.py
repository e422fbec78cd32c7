"""The audio simulator's parts: real speech through livekit-agents' real audio pipeline.

``ringflow call simulate --audio`` runs the same call as text mode (``simulator.py``), but
the agent's ``AgentSession`` has livekit's VAD and end-of-turn model, an offline STT and an
offline TTS, and its room is replaced by two ``livekit.agents.voice.io`` objects of ours:

* ``caller_voice``: the caller's lines spoken by piper (a CC0 voice from PyPI), cached by
  content hash; noise bursts;
* ``microphone``: the caller's microphone, an ``io.AudioInput`` that yields 20 ms frames in
  real time (a low noise floor between utterances);
* ``speaker``: the caller's loudspeaker, an ``io.AudioOutput`` that plays the agent's audio
  in real time and reports playback as livekit's room output does;
* ``sphinx``: a livekit STT plugin on pocketsphinx, in a worker process (it holds the GIL);
* ``espeak``: a livekit TTS plugin on Debian's ``espeak-ng``;
* ``supervisor_mic``: a supervisor in the stand-in room (``background.SimulatedRoom``),
  speaking into a real livekit audio track the agent transcribes;
* ``player``: plays one script against one agent and times each turn.

piper and espeak-ng are GPL-3: they are development tools (the ``dev`` extra, ``.ci/run``),
never in an image.
"""
