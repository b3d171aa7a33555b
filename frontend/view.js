// The standalone `view` page: the same dashboard, outside TensorBoard's iframe.
import {render} from '../index.js';

render();
