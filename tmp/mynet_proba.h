
#include <eml_net.h>
static const float mynet_layer_0_biases[16] = { -0.103552f, 0.078824f, -0.018536f, 0.215619f, 0.024614f, 0.065439f, -0.054138f, -0.249744f, -0.316835f, -0.309772f, -0.337413f, 0.003185f, 0.300817f, -0.014399f, 0.316114f, -0.323213f };
static const float mynet_layer_0_weights[80] = { 0.168975f, -0.060364f, -0.082810f, -0.334318f, 0.009260f, -0.122985f, 0.069514f, 0.238644f, 0.289340f, -0.214970f, 0.203875f, 0.093113f, -0.156377f, 0.327424f, -0.163900f, 0.146358f, 0.063959f, -0.080344f, 0.027820f, 0.069381f, 0.326742f, -0.230443f, -0.185897f, 0.143401f, -0.202602f, -0.222337f, 0.058933f, -0.146986f, 0.133625f, 0.218530f, 0.192827f, 0.003289f, -0.075687f, 0.173983f, -0.123838f, 0.098575f, 0.091318f, -0.194060f, 0.253331f, -0.154870f, -0.073081f, -0.090978f, -0.314554f, 0.063484f, -0.129428f, 0.031147f, -0.023890f, -0.321120f, -0.220638f, 0.049987f, 0.257636f, 0.027192f, -0.163607f, 0.350037f, 0.277719f, 0.051392f, -0.216322f, -0.199585f, -0.164740f, -0.107028f, 0.086141f, -0.101168f, -0.005987f, 0.226750f, -0.069714f, 0.163888f, -0.090864f, -0.249332f, 0.309862f, -0.161184f, 0.188213f, 0.256483f, 0.068943f, -0.272513f, -0.059055f, -0.078660f, 0.036159f, -0.196468f, -0.101080f, -0.143132f };
static const float mynet_layer_1_biases[3] = { 0.100581f, -0.223145f, -0.265386f };
static const float mynet_layer_1_weights[48] = { -0.009116f, -0.227277f, 0.039646f, -0.204493f, 0.046913f, -0.183435f, -0.152862f, 0.110207f, -0.201447f, 0.168748f, -0.155701f, 0.199121f, -0.169888f, -0.007102f, -0.180149f, 0.094326f, 0.318257f, -0.148385f, -0.210240f, -0.054657f, -0.022062f, -0.009293f, 0.343601f, -0.116193f, -0.180399f, -0.183629f, 0.109355f, 0.197306f, -0.202733f, 0.222840f, 0.198242f, -0.044980f, -0.203408f, 0.122810f, -0.189136f, -0.012519f, 0.006478f, 0.299630f, -0.120101f, -0.359616f, 0.026719f, -0.084139f, -0.183705f, -0.074835f, -0.178381f, 0.095067f, -0.105168f, 0.309800f };
static float mynet_buf1[16];
static float mynet_buf2[16];
static const EmlNetLayer mynet_layers[2] = { 
{ 16, 5, mynet_layer_0_weights, mynet_layer_0_biases, EmlNetActivationLogistic }, 
{ 3, 16, mynet_layer_1_weights, mynet_layer_1_biases, EmlNetActivationSoftmax } };
static EmlNet mynet = { 2, mynet_layers, mynet_buf1, mynet_buf2, 16 };

    int32_t
    mynet_predict(const float *features, int32_t n_features)
    {
        return eml_net_predict(&mynet, features, n_features);
    }
    

    int32_t
    mynet_regress(const float *features, int32_t n_features, float *out, int32_t out_length)
    {
        return eml_net_regress(&mynet, features, n_features, out, out_length);
    }
    

    float
    mynet_regress1(const float *features, int32_t n_features)
    {
        return eml_net_regress1(&mynet, features, n_features);
    }
    