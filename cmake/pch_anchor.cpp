// Anchors the shared precompiled header (cmake/EngineryPch.cmake).
