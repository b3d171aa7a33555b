"""What TensorBoard talks to: the logdir's traces found (`discovery`), reduced views
cached on disk (`cache`), requests admitted (`gate`), indexes and views served within
the memory budget (`service`), and the plugin's routes (`plugin`: the HTTP statuses
live there and nowhere else). The top layer: nothing below imports it.
"""
